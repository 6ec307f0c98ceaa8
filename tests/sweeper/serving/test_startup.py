"""Start-up phases read from a server's log: the detailed steps and those a study stores."""

import time

import pytest

from sweeper.serving import START_PHASES, parse_startup

# A first server on a fresh machine (vLLM 0.26.0, H200, 2026-12-01), cut to the lines that
# mark its start-up, paths shortened; one line of the API server's banner, and a line of
# progress bars that carries no time.
COLD_LOG = """\
11:08:11 INFO sweeper.serving._command: exec: python3 -m vllm.entrypoints.openai.api_server --model model
(APIServer pid=890) INFO 12-01 11:08:28 [api_utils.py:345]  version 0.26.0
(EngineCore pid=1073) INFO 12-01 11:09:22 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='model'
(EngineCore pid=1073) INFO 12-01 11:09:24 [model_runner.py:305] Model loading took 0.02 GiB and 1.522640 seconds
(EngineCore pid=1073) INFO 12-01 11:09:27 [backends.py:1094] Using cache directory: /c/vllm/torch_compile_cache/b3d7082411/rank_0_0/backbone for vLLM's torch.compile
(EngineCore pid=1073) INFO 12-01 11:09:43 [backends.py:393] Compiling a graph for compile range (1, 8192) takes 15.60 s
(EngineCore pid=1073) INFO 12-01 11:09:44 [monitor.py:53] torch.compile took 18.97 s in total
(EngineCore pid=1073) INFO 12-01 11:09:45 [backends.py:1094] Using cache directory: /c/vllm/torch_compile_cache/b3d7082411/rank_0_0/eagle_head for vLLM's torch.compile
(EngineCore pid=1073) INFO 12-01 11:09:52 [backends.py:393] Compiling a graph for compile range (1, 8192) takes 6.23 s
(EngineCore pid=1073) INFO 12-01 11:09:52 [monitor.py:53] torch.compile took 7.17 s in total
(EngineCore pid=1073) INFO 12-01 11:09:56 [kv_cache_utils.py:2177] GPU KV cache size: 42,747,595 tokens
(EngineCore pid=1073) Capturing CUDA graphs (PIECEWISE): 100%|##########| 51/51 [00:00<00:00, 101.90it/s]
(EngineCore pid=1073) INFO 12-01 11:09:58 [model_runner.py:747] Graph capturing finished in 2 secs, took 0.29 GiB
(EngineCore pid=1073) INFO 12-01 11:10:14 [core.py:340] init engine (profile, create kv cache, warmup model) took 50.00 s (compilation: 26.15 s)
(APIServer pid=890) INFO 12-01 11:10:28 [api_server.py:677] Starting vLLM server on http://127.0.0.1:41365
"""


def test_the_startup_phases_come_from_the_log_timestamps() -> None:
    startup = parse_startup(COLD_LOG, ready_s=138.4)
    assert dict(startup.phases) == {
        "api imports": 17.0,
        "engine process start": 54.0,
        "weight load": 2.0,
        "torch.compile": 28.0,
        "memory profile, KV cache": 4.0,
        "CUDA graph capture": 2.0,
        "engine warm-up after capture": 16.0,
        "api set-up": 14.0,
        "first answer": 1.4,
    }
    assert sum(seconds for _, seconds in startup.phases) == pytest.approx(138.4)
    assert startup.compile_s == pytest.approx(26.14) and startup.compile_misses == 2 and startup.compile_hits == 0
    assert startup.cache_hit is False and startup.cache_hashes == ("b3d7082411",)
    assert (startup.graph_capture_s, startup.init_engine_s) == (2.0, 50.0)


def test_the_stored_phases_fold_the_steps_and_sum_to_the_start() -> None:
    stored = dict(parse_startup(COLD_LOG, ready_s=138.4).stored())
    assert tuple(stored) == START_PHASES
    # 11:08:11 exec -> 11:08:28 API banner (17 s) -> 11:09:22 engine process (54 s) -> 11:09:24 weights (2 s)
    # -> 11:09:52 compiled (28 s) -> 11:09:56 KV cache (4 s) -> 11:09:58 graphs (2 s) -> 11:10:14 engine done
    # (16 s) -> ready at 138.4 s (the rest, 15.4 s)
    assert stored == pytest.approx(
        {
            "api imports": 17.0,
            "engine start": 54.0,
            "weights": 2.0,
            "compile": 28.0,
            "kv cache": 4.0,
            "graph capture": 2.0,
            "engine warm-up": 16.0,
            "api ready": 15.4,
        }
    )
    assert sum(stored.values()) == pytest.approx(138.4)
    # a start measured shorter than the log's seconds say: the later phases are cut, nothing is negative
    short = dict(parse_startup(COLD_LOG, ready_s=100.0).stored())
    assert short == pytest.approx(
        {
            "api imports": 17.0,
            "engine start": 54.0,
            "weights": 2.0,
            "compile": 27.0,
            "kv cache": 0.0,
            "graph capture": 0.0,
            "engine warm-up": 0.0,
            "api ready": 0.0,
        }
    )
    # no start time measured, or no engine step in the log: the start stays one phase
    assert parse_startup(COLD_LOG).stored() == ()
    banner_only = (
        "11:08:11 INFO sweeper.serving._command: exec: serve\n(APIServer pid=1) INFO 12-01 11:08:28 [a.py:1] up\n"
    )
    assert parse_startup(banner_only, ready_s=20.0).stored() == ()


def test_a_log_without_sweepers_exec_line_is_anchored_at_the_process_start() -> None:
    own_serve = "\n".join(line for line in COLD_LOG.splitlines() if "exec:" not in line)
    day = time.localtime()
    started = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 11, 8, 11, 0, 0, -1)) + 0.5
    stored = dict(parse_startup(own_serve, ready_s=137.9, started_at=started).stored())
    assert stored["api imports"] == pytest.approx(16.5)  # from the process start, half a second past 11:08:11
    assert sum(stored.values()) == pytest.approx(137.9) and stored["api ready"] == pytest.approx(15.4)


def test_a_cache_hit_a_missing_milestone_and_midnight() -> None:
    log = """\
23:59:50 INFO sweeper.serving._command: exec: python3 -m vllm.entrypoints.openai.api_server
(APIServer pid=1) INFO 12-01 23:59:58 [api_utils.py:345]  version 0.26.0
(EngineCore pid=2) INFO 12-02 00:00:20 [backends.py:292] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.348 s
(EngineCore pid=2) INFO 12-02 00:00:21 [monitor.py:53] torch.compile took 1.26 s in total
(APIServer pid=1) INFO 12-02 00:00:40 [api_server.py:677] Starting vLLM server on http://127.0.0.1:1
"""
    startup = parse_startup(log)
    # no engine line, no weights line: their time folds into the next phase found
    assert dict(startup.phases) == {"api imports": 8.0, "torch.compile": 23.0, "api set-up": 19.0}
    assert startup.cache_hit is True and startup.compile_s == 1.26
    assert parse_startup("no timestamps here").phases == ()
    assert parse_startup("no timestamps here").cache_hit is None
