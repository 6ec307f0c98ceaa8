"""The harness-parity benchmark's statistics and parsing (``benchmarks/parity.py``), and its script's wiring."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
DATA = Path(__file__).resolve().parent / "data"
# a result file of sglang 0.5.2's bench_serving.py (--output-details), from a run of the
# harness's flags at 8 prompts x 32 tokens against the CPU demo server
CAPTURED = DATA / "bench_serving_8x32.jsonl"


@pytest.fixture(scope="module")
def parity(load_benchmark):
    return load_benchmark("parity")


def test_the_t_quantile_has_one_home(parity) -> None:
    from evaluators import intervals

    assert parity.t_quantile is intervals.t_quantile


def test_ratio_interval_is_t_on_the_log_ratios(parity) -> None:
    ratios = [1.028, 1.038, 0.940, 0.962, 0.929, 0.910, 0.898, 0.953]  # the rounds
    logs = np.log(ratios)
    mean, se = logs.mean(), logs.std(ddof=1) / math.sqrt(len(logs))
    low, high = stats.t.interval(0.95, len(logs) - 1, loc=mean, scale=se)
    summary = parity.ratio_summary(ratios)
    assert summary.count == 8
    assert summary.geometric_mean == pytest.approx(math.exp(mean), rel=1e-12)
    assert summary.low == pytest.approx(math.exp(low), rel=1e-9)
    assert summary.high == pytest.approx(math.exp(high), rel=1e-9)
    assert 2.3646 < stats.t.ppf(0.975, 7) < 2.3647  # the table's t(0.975, 7)
    assert summary.log_sd == pytest.approx(logs.std(ddof=1), rel=1e-12)
    assert summary.geometric_mean == pytest.approx(0.9561, abs=1e-4)
    assert summary.low < summary.geometric_mean < summary.high < 1.0


def test_ratio_interval_covers_at_its_rate(parity) -> None:
    rng = random.Random(3)
    covered = 0
    for _ in range(400):
        ratios = [math.exp(rng.gauss(0.0, 0.05)) for _ in range(6)]
        s = parity.ratio_summary(ratios)
        covered += s.low <= 1.0 <= s.high
    assert 0.91 <= covered / 400 <= 0.985


def test_one_ratio_has_no_interval_and_bad_ratios_are_refused(parity) -> None:
    s = parity.ratio_summary([1.1])
    assert (s.count, s.low, s.high) == (1, None, None)
    assert "no interval" in s.describe()
    with pytest.raises(ValueError):
        parity.ratio_summary([])
    with pytest.raises(ValueError):
        parity.ratio_summary([1.0, 0.0])


def test_parse_a_captured_bench_serving_result(parity) -> None:
    run = parity.parse_harness_result(CAPTURED.read_text())
    assert run.tps == pytest.approx(97.17735075976188)
    assert run.duration_s == pytest.approx(2.6343587060000573)
    assert (run.completed, run.output_tokens) == (8, 256)
    assert run.output_lens == (32,) * 8
    assert run.input_lens == (62, 48, 203, 245, 111, 132, 84, 130)
    assert run.errors == ()
    # non-streaming: its "ttft" is each request's whole latency, and TPS is tokens / duration
    assert len(run.latencies_s) == 8 and sum(run.latencies_s) < run.duration_s
    assert sum(run.latencies_s) / 8 * 1000 == pytest.approx(328.8147683747411)
    assert run.tps == pytest.approx(run.output_tokens / run.duration_s)
    gaps = parity.gap_summary(run.duration_s, run.latencies_s)
    assert gaps["gap_total_s"] == pytest.approx(run.duration_s - sum(run.latencies_s))
    assert 0 < gaps["gap_per_request_ms"] < 5


def test_a_result_without_details_is_refused(parity) -> None:
    record = json.loads(CAPTURED.read_text().splitlines()[-1])
    del record["ttfts"]
    with pytest.raises(ValueError, match="output-details"):
        parity.parse_harness_result(json.dumps(record))
    with pytest.raises(ValueError, match="empty"):
        parity.parse_harness_result("\n")


def test_gaps_between_requests(parity) -> None:
    # requests of 1.0, 2.0 and 0.5 s, with 10 ms and 30 ms between them
    ends = [1.0, 3.01, 3.54]
    assert parity.gaps_between(ends, [1.0, 2.0, 0.5]) == pytest.approx([0.01, 0.03])
    with pytest.raises(ValueError):
        parity.gaps_between([1.0], [1.0, 2.0])


def test_cpu_in_the_last_window(parity) -> None:
    samples = [(0.25 * i, 0.2 * i) for i in range(1, 40)]  # 0.8 CPU s per s
    # ended at 10 s with 8.0 CPU s; the last 2 s start at the sample of 8.0 s (6.4 CPU s)
    assert parity.cpu_in_last(samples, 10.0, 2.0, 8.0) == pytest.approx(1.6)
    assert parity.cpu_in_last(samples, 10.0, 20.0, 8.0) == pytest.approx(8.0)


def test_host_cpu_and_a_process_tree(parity) -> None:
    busy, total = parity.host_cpu_jiffies("cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 1 2 3 4\n")
    assert (busy, total) == (160, 980)
    busy, total = parity.host_cpu_jiffies()
    assert 0 <= busy <= total
    assert parity.process_tree_cpu_s(os.getpid()) >= parity.process_cpu_s(os.getpid()) > 0
    assert parity.process_cpu_s(2**22 + 12345) is None


def test_extended_prompts_are_distinct_and_keep_the_set_first(parity) -> None:
    base = [(f"p{i}", f"w{i} x{i} y{i} z") for i in range(64)]
    chosen = parity.extend_prompts(base, 128)
    assert len(chosen) == 128 and chosen[:64] == base
    assert len({pid for pid, _ in chosen}) == 128 and len({text for _, text in chosen}) == 128
    assert chosen[64] == ("p0-v1", "z y0 x0 w0")
    assert parity.extend_prompts(base, 10) == base[:10]
    records = parity.sharegpt_records(chosen[:2])
    assert [len(r["conversations"]) for r in records] == [2, 2]


def test_round_order_alternates(parity) -> None:
    assert [parity.round_order(i)[0] for i in range(4)] == ["harness", "ours", "harness", "ours"]
    assert parity.round_order(1) == ("ours", "harness")


def test_round_order_with_three_sides_puts_each_side_in_each_place(parity) -> None:
    sides = ("harness", "ours", "ours:keep-alive")
    orders = [parity.round_order(i, sides) for i in range(6)]
    assert orders[1] == ("ours", "ours:keep-alive", "harness")
    for place in range(3):
        assert sorted(o[place] for o in orders[:3]) == sorted(sides)
    assert orders[3:] == orders[:3]


def test_counters_are_summed_over_engines(parity) -> None:
    samples = {"vllm:e2e_request_latency_seconds_sum": [({"engine": "0"}, 1.5), ({"engine": "1"}, 0.5)]}
    counters = parity.counters_from_samples(samples)
    assert counters["e2e_s"] == 2.0 and counters["decode_s"] == 0.0
    assert parity.counter_delta(counters, {**counters, "e2e_s": 3.0})["e2e_s"] == 1.0


def test_size_summary_and_parse_size(load_benchmark) -> None:
    bench = load_benchmark("tps_vs_harness_client")
    assert bench.parse_size("128x512") == (128, 512)

    def side(tps: float, offset: int) -> dict:
        return {
            "ok": True,
            "tps": tps,
            "output_lens": [32, 32],
            "input_lens": [10 + offset, 20 + offset],
            "server": {"requests": 6.0, "e2e_s": 6.0 / tps, "decode_s": 3.0 / tps},
        }

    rounds = [{"ours": side(100.0, 6), "harness": side(98.0, 0)}, {"ours": side(101.0, 6), "harness": side(103.0, 0)}]
    summary = bench.size_summary(rounds)
    assert summary["ratios"] == pytest.approx([100 / 98, 101 / 103])
    assert summary["ratio"]["geometric_mean"] == pytest.approx(math.sqrt(100 / 98 * 101 / 103))
    assert summary["same_tokens"] is True and summary["prompt_token_offsets"] == [6]
    assert summary["server_e2e_s_ratio"]["geometric_mean"] == pytest.approx(1 / summary["ratio"]["geometric_mean"])
    # here the server's time alone sets each run's TPS: held equal, the clients read the same
    assert summary["equal_server_time_ratio"]["geometric_mean"] == pytest.approx(1.0)
    # ours 2 % and 3 % slower than the harness over a server as fast in both runs: the clients' own part
    served = side(100.0, 0)["server"]
    slower = [
        {"ours": {**side(100.0 / 1.02, 6), "server": served}, "harness": side(100.0, 0)},
        {"ours": {**side(100.0 / 1.03, 6), "server": served}, "harness": side(100.0, 0)},
    ]
    clients = bench.size_summary(slower)["equal_server_time_ratio"]
    assert clients["geometric_mean"] == pytest.approx(math.sqrt(1 / 1.02 / 1.03)) and clients["count"] == 2


def test_ours_sides_and_a_summary_against_another_side(load_benchmark) -> None:
    bench = load_benchmark("tps_vs_harness_client")
    side_of = bench.OursSide
    assert bench.ours_sides("harness") == {"ours": side_of("harness")}
    assert bench.ours_sides("harness, keep-alive") == {
        "ours": side_of("harness"),
        "ours:keep-alive": side_of("keep-alive"),
    }
    assert bench.ours_sides("keep-alive,harness") == {"ours": side_of("keep-alive"), "ours:harness": side_of("harness")}
    for bad in ("", "harness,harness", "pipelined"):
        with pytest.raises(argparse.ArgumentTypeError, match="--ours-connection"):
            bench.ours_sides(bad)

    def side(tps: float) -> dict:
        return {
            "ok": True,
            "tps": tps,
            "output_lens": [32],
            "input_lens": [16],
            "server": {"requests": 5.0, "e2e_s": 5.0 / tps, "decode_s": 4.0 / tps},
        }

    rounds = [
        {"harness": side(100.0), "ours": side(99.0), "ours:keep-alive": side(93.0)},
        {"harness": side(104.0), "ours": {"ok": False}, "ours:keep-alive": side(95.0)},
        {"harness": side(102.0), "ours": side(103.0), "ours:keep-alive": side(96.0)},
    ]
    kept = bench.size_summary(rounds, "ours:keep-alive")
    assert kept["complete_rounds"] == 3
    assert kept["ratios"] == pytest.approx([0.93, 95 / 104, 96 / 102])
    against_ours = bench.size_summary(rounds, "ours:keep-alive", "ours")
    assert against_ours["complete_rounds"] == 2 and against_ours["ratios"] == pytest.approx([93 / 99, 96 / 103])
    assert against_ours["prompt_token_offsets"] == [0]
    entry: dict = {}
    bench.summarize(entry, rounds, ("harness", "ours", "ours:keep-alive"))
    assert set(entry["pairs"]) == {"ours / harness", "ours:keep-alive / harness", "ours:keep-alive / ours"}
    assert entry["summary"]["ratios"] == pytest.approx([0.99, 103 / 102])


def _bench_serving_file() -> Path | None:
    given = os.environ.get("BENCH_SERVING")
    return Path(given) if given and Path(given).is_file() else None


@pytest.mark.skipif(
    _bench_serving_file() is None,
    reason="set BENCH_SERVING to sglang 0.5.2's bench_serving.py (see docs/measurement.md)",
)
def test_the_harness_client_samples_our_order(parity, tmp_path) -> None:
    """Its ShareGPT sampler, seeded as its --seed 1 does, picks the prompts measure_tps sends, in order."""
    pytest.importorskip("aiohttp")
    spec = importlib.util.spec_from_file_location("bench_serving_under_test", _bench_serving_file())
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from transformers import AutoTokenizer

    from evaluators import TpsSettings, load_prompts
    from evaluators.tps import select_prompts
    from sweeper.demo import demo_paths

    demo = demo_paths()
    pairs = [(p.id, p.text) for p in load_prompts(demo.prompts_tuning)]
    pairs += [(p.id, p.text) for p in load_prompts(demo.prompts_heldout)]
    dataset = tmp_path / "prompts.json"
    dataset.write_text(json.dumps(parity.sharegpt_records(parity.extend_prompts(pairs, 128))))
    tokenizer = AutoTokenizer.from_pretrained(str(demo.model))
    for count in (8, 128):
        random.seed(1)
        np.random.seed(1)
        rows = bench.sample_sharegpt_requests(str(dataset), count, tokenizer, fixed_output_len=32)
        ours = select_prompts(load_prompts(dataset), TpsSettings(num_prompts=count))
        assert [row.prompt for row in rows] == [p.text for p in ours]


def test_relative_speed_by_request_removes_the_prompt_and_keeps_the_state(parity) -> None:
    prompt_cost = [1.0, 2.0, 0.5, 3.0]
    fast = [c * 1.0 for c in prompt_cost]
    slow_tail = [c * (1.0 if i < 2 else 1.5) for i, c in enumerate(prompt_cost)]
    relative = parity.relative_speed_by_request([fast, fast, slow_tail])
    assert relative[0] == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert relative[2] == pytest.approx([1.0, 1.0, 1.5, 1.5])
    with pytest.raises(ValueError, match="same number of requests"):
        parity.relative_speed_by_request([fast, fast[:3]])


def test_pairs_for_interval_matches_the_t_interval(parity) -> None:
    sd = 0.077
    pairs = parity.pairs_for_interval(sd, 0.02)
    # the interval of that many pairs with a mean log ratio of 0 lies within 0.98-1.02, one pair fewer does not
    rng = np.random.default_rng(3)
    for n, inside in ((pairs, True), (pairs - 1, False)):
        logs = rng.standard_normal(n)
        logs = (logs - logs.mean()) / logs.std(ddof=1) * sd  # exactly mean 0, SD sd
        summary = parity.ratio_summary(list(np.exp(logs)))
        assert (summary.low >= 1 / 1.02 and summary.high <= 1.02) is inside
    assert 55 <= pairs <= 65  # (1.96 * 0.077 / log 1.02) ** 2 = 58 by the normal, a little more by t


def test_the_real_pooled_record_reads_as_docs_state(parity) -> None:
    """The harness-parity finding, recomputed from the record with scipy's t (not parity's code path alone)."""
    import csv

    with (BENCHMARKS / "results" / "gpu-parity-rounds.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["size"] == "128x512"]
    raw = [float(r["ours_tps"]) / float(r["harness_tps"]) for r in rows]
    equal = [
        ratio * float(r["server_e2e_ms_ours"]) / float(r["server_e2e_ms_harness"])
        for ratio, r in zip(raw, rows)
        if r["server_e2e_ms_ours"] and r["server_e2e_ms_harness"]
    ]
    for ratios, (count, mean, low, high) in (
        (raw, (46, 0.999, 0.979, 1.020)),
        (equal, (37, 0.9997, 0.9995, 0.9999)),
    ):
        logs = np.log(ratios)
        ci = stats.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=logs.std(ddof=1) / math.sqrt(len(logs)))
        summary = parity.ratio_summary(ratios)
        assert summary.count == len(ratios) == count
        assert (summary.low, summary.high) == pytest.approx(tuple(np.exp(ci)), rel=1e-9)
        digits = 3 if count == 46 else 4
        assert [round(x, digits) for x in (summary.geometric_mean, summary.low, summary.high)] == [mean, low, high]


def test_ours_run_refuses_an_unknown_connection_before_sending(tmp_path) -> None:
    out = tmp_path / "never.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.tps_vs_harness_client",
            "ours-run",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--prompts",
            "missing.json",
            "--connection",
            "pipelined",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=BENCHMARKS.parent,
    )
    assert done.returncode == 2 and "--connection" in done.stderr and "pipelined" in done.stderr
    assert not out.exists()


def test_ours_run_measures_a_server_in_a_process_of_its_own(parity, tmp_path) -> None:
    """The side ``ours``: one measure_tps run against a real HTTP server on localhost, from a child process."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sent: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _reply(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._reply(b"", "text/plain")  # /metrics: no counters

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            sent.append(body)
            answer = {
                "choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": body["max_tokens"]},
            }
            self._reply(json.dumps(answer).encode(), "application/json")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(parity.sharegpt_records([(f"p{i}", f"prompt number {i}") for i in range(3)])))
    out = tmp_path / "ours.json"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.tps_vs_harness_client",
                "ours-run",
                "--base-url",
                f"http://127.0.0.1:{server.server_address[1]}",
                "--model",
                "m",
                "--prompts",
                str(prompts),
                "--num-prompts",
                "2",
                "--output-len",
                "8",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=BENCHMARKS.parent,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    requests = data["result"]["requests"]
    assert [r["output_tokens"] for r in requests] == [8, 8]
    assert data["result"]["tps"] == pytest.approx(16 / data["result"]["duration_s"])
    # measure_tps's defaults: 4 warm-up requests of min(8, 32) tokens, then the 2 measured ones of 8
    assert [b["max_tokens"] for b in sent] == [8] * 6 and len(sent) == 6
    ends = data["request_ends_s"]
    assert len(ends) == 2 and 0 < ends[0] < ends[1] <= data["process_s"]
    assert ends[1] - requests[1]["latency_s"] >= ends[0] - 1e-3  # the second started after the first ended
    assert 0 <= data["window_cpu_s"] <= data["self_cpu_s"]
