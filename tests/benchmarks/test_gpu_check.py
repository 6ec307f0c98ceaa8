"""The GPU check script's logic that needs no GPU: parts, spreads, the results file and its summary."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def gpu_check(load_benchmark):
    return load_benchmark("gpu_check", "gpu_check_under_test")


def test_parts_are_checked_and_keep_their_order(gpu_check) -> None:
    assert gpu_check.parse_parts("noise, serve") == ("noise", "serve")
    with pytest.raises(SystemExit, match="unknown part"):
        gpu_check.parse_parts("serve,warp")
    assert gpu_check.parse_ints("1,8,32", "--top-k") == (1, 8, 32)
    assert gpu_check.parse_sizes("8x128, 128x512") == ((8, 128), (128, 512))
    with pytest.raises(SystemExit, match="--sizes: expected PROMPTSxTOKENS"):
        gpu_check.parse_sizes("8x")
    with pytest.raises(SystemExit, match="--top-k: expected integers"):
        gpu_check.parse_ints("1,eight", "--top-k")


def test_spread_figures(gpu_check) -> None:
    spread = gpu_check.Spread((745.0, 627.0, 700.0))
    assert spread.log_sd == pytest.approx(statistics.stdev([math.log(745.0), math.log(627.0), math.log(700.0)]))
    mean = (745.0 + 627.0 + 700.0) / 3
    assert spread.mean == pytest.approx(mean)
    assert spread.relative_range == pytest.approx((745.0 - 627.0) / mean)
    assert spread.cv == pytest.approx(statistics.stdev([745.0, 627.0, 700.0]) / mean)
    assert gpu_check.Spread((5.0,)).cv is None
    assert gpu_check.trials_per_hour(72.0) == pytest.approx(50.0)


def test_each_figure_is_written_at_once_and_summarized(gpu_check, tmp_path: Path) -> None:
    recorder = gpu_check.Recorder(tmp_path)
    recorder.write("noise", server=0, tps=700.0, sizes=[8, 128])
    assert json.loads(recorder.path.read_text())["tps"] == 700.0  # on disk before the next figure
    recorder.write("noise", server=1, tps=630.0, sizes=[8, 128])
    recorder.write("ctk", top_k=1, acceptance_length=2.0)
    recorder.write("ctk", top_k=32, acceptance_length=2.67)
    lines = gpu_check.summary_lines(gpu_check.read_records(recorder.path))
    assert "noise [8, 128]: 2 servers, mean 665.0 tok/s, range 10.5 %, cv 7.4 %, sd of log TPS 0.075" in lines
    assert "ctk 1: acceptance length 2.00" in lines and "ctk 32: acceptance length 2.67" in lines


def test_info_part_runs_without_a_gpu_and_a_failed_part_is_recorded(gpu_check, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_check, "RUNNERS", {"serve": lambda *args: 1 / 0})
    gpu_check.main(["--only", "info,serve", "--out", str(tmp_path)])
    records = gpu_check.read_records(tmp_path / "gpu_check.jsonl")
    info = next(r for r in records if r["part"] == "info")
    assert info["sweeper"] and "python" in info
    error = next(r for r in records if r["part"] == "error")
    assert error["failed_part"] == "serve" and "ZeroDivisionError" in error["error"]
    assert [r["timed_part"] for r in records if r["part"] == "timing"] == ["info", "serve"]


# (parse_startup itself is tested in tests/sweeper/serving/test_startup.py)
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


def test_padded_prompts_reach_the_count_with_new_prefixes(gpu_check, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([{"id": "t0", "conversations": [{"from": "human", "value": "one two three"}]}]))
    b.write_text(
        json.dumps(
            [
                {
                    "id": "h0",
                    "conversations": [{"from": "human", "value": "four five"}, {"from": "gpt", "value": "six seven"}],
                }
            ]
        )
    )
    path = gpu_check.padded_prompts((a, b), 5, tmp_path / "out" / "p.json")
    prompts = json.loads(path.read_text())
    assert [p["id"] for p in prompts] == ["t0", "h0", "t0-copy1", "h0-copy1", "t0-copy2"]
    assert [p["conversations"][0]["value"] for p in prompts] == [
        "one two three",
        "four five",
        "two three one",
        "five four",
        "three one two",
    ]
    assert prompts[3]["conversations"][1]["value"] == "six seven"  # only the human turn is reworded
    assert len({p["conversations"][0]["value"] for p in prompts}) == 5


def trial(number, state, window, retry_of=None):
    return {"number": number, "state": state, "params": {"sliding_window": window}, "retry_of": retry_of}


def test_the_resume_verdict(gpu_check) -> None:
    before = [trial(0, "COMPLETE", 32), trial(1, "RUNNING", 8)]
    good = [trial(0, "COMPLETE", 32), trial(1, "FAIL", 8), trial(2, "COMPLETE", 8, retry_of=1)]
    verdict = gpu_check.resume_verdict(before, good, killed=1, n_trials=2)
    assert verdict == {
        "killed_state_after": "FAIL",
        "killed_retried_as": [2],
        "complete": 2,
        "lost": [],
        "run_twice": [],
        "ok": True,
    }
    never_retried = [trial(0, "COMPLETE", 32), trial(1, "FAIL", 8), trial(2, "COMPLETE", 20)]
    verdict = gpu_check.resume_verdict(before, never_retried, killed=1, n_trials=2)
    assert verdict["lost"] == [1] and not verdict["ok"]
    twice = good + [trial(3, "COMPLETE", 32)]
    verdict = gpu_check.resume_verdict(before, twice, killed=1, n_trials=2)
    assert verdict["run_twice"] == ['{"sliding_window": 32}'] and not verdict["ok"]


def test_startup_and_resume_figures_are_summarized(gpu_check, tmp_path: Path) -> None:
    recorder = gpu_check.Recorder(tmp_path)
    startup = gpu_check.parse_startup(COLD_LOG, ready_s=138.4)
    recorder.write(
        "startup", case="cold", sliding_window="32", trial_s=142.0, trials_per_hour=25.4, **startup.to_dict()
    )
    recorder.write(
        "resume-kill", killed_trial=1, gpu_memory_at_kill_mib=44000.0, idle_mib=615.0, freed_after_s=0.8, pids_after=[]
    )
    recorder.write(
        "resume",
        rc=0,
        rerun_s=120.0,
        **gpu_check.resume_verdict(
            [trial(0, "COMPLETE", 32), trial(1, "RUNNING", 8)],
            [trial(0, "COMPLETE", 32), trial(1, "FAIL", 8), trial(2, "COMPLETE", 8, retry_of=1)],
            killed=1,
            n_trials=2,
        ),
    )
    recorder.write("startup-trial", trial="trial-0001", **gpu_check.parse_startup(COLD_LOG).to_dict())
    lines = gpu_check.summary_lines(gpu_check.read_records(recorder.path))
    assert lines[3].startswith("startup of sweeper's trial-0001: api imports 17, engine process start 54,")
    assert lines[3].endswith("compile 26.14 s, cache hit False (b3d7082411)")
    assert lines[0].startswith("startup cold (window 32): ready 138 s = api imports 17, engine process start 54,")
    assert lines[0].endswith("compile 26.14 s, cache hit False; trial 142 s = 25 trials/h")
    assert lines[1] == (
        "resume: SIGKILL in trial 1 at 44000.0 MiB (idle 615.0); freed after 0.8 s, GPU processes left []"
    )
    assert lines[2] == (
        "resume: re-run rc 0 in 120.0 s; 2 complete, killed trial now FAIL, retried as [2], lost [], run twice []: ok"
    )


def test_sigterm_unwinds_the_part_so_its_server_is_stopped(gpu_check, tmp_path: Path, monkeypatch) -> None:
    import contextlib
    import os
    import signal

    stopped = []

    def part(*args):
        with contextlib.ExitStack() as server:  # stands in for the ServerProcess of a part
            server.callback(stopped.append, "server stopped")
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(gpu_check, "RUNNERS", {"serve": part})
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as ended:
        gpu_check.main(["--only", "serve", "--out", str(tmp_path)])
    assert ended.value.code == 128 + signal.SIGTERM and stopped == ["server stopped"]
    assert signal.getsignal(signal.SIGTERM) is before


def _fork_probe(case: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.fork_probe", case], cwd=root, capture_output=True, text=True, timeout=120
    )


def test_the_fork_probe_queries_in_a_forked_child_and_reports_a_failure_as_a_value() -> None:
    done = _fork_probe("torch")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    child = result["child"]
    # the query ran in a child of the probe, not in the probe itself
    assert child["parent_pid"] == result["pid"] != child["pid"]
    # the parent state is the case's: torch imported (a CPU build here), nothing else asked
    import torch

    assert result["parent"] == {"torch": torch.__version__, "cuda_build": torch.version.cuda}
    # this machine has no NVML (no nvidia-ml-py, or no driver): a value saying why, not a crash
    assert child["nvml"]["via"] in ("pynvml", "ctypes")
    assert set(child["nvml"]) == {"via", "error"} or child["nvml"]["gib"] > 0


def test_the_fork_probe_refuses_an_unknown_case_in_one_line() -> None:
    done = _fork_probe("warp")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "one of none, nvml-closed" in done.stderr


def test_fork_figures_are_summarized(gpu_check) -> None:
    record = {
        "part": "fork",
        "case": "vllm",
        "parent": {"platform": "CudaPlatform"},
        "child": {"nvml": {"gib": 79.19}, "vllm": {"error": "NVMLError_Unknown: Unknown Error"}},
    }
    assert gpu_check.summary_lines([record]) == [
        'fork vllm: parent {"platform": "CudaPlatform"}; child NVML 79.19 GiB, '
        "vLLM's platform failed (NVMLError_Unknown: Unknown Error)"
    ]
    assert gpu_check.summary_lines(
        [{"part": "fork", "case": "none", "parent": {}, "child": {"nvml": {"error": "x"}}}]
    ) == ["fork none: parent {}; child NVML failed (x)"]
