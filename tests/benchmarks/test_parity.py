"""The parity benchmarks' statistics and parsing (``benchmarks/parity.py``), and the wiring they rely on."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
DATA = Path(__file__).resolve().parent / "data"
# a result file of sglang 0.5.2's bench_serving.py (--output-details), from a run of the
# harness's flags at 8 prompts x 32 tokens against the CPU demo server
CAPTURED = DATA / "bench_serving_8x32.jsonl"


@pytest.fixture(scope="module")
def parity(load_benchmark):
    return load_benchmark("parity")


# t quantiles of a printed table (97.5 %, by degrees of freedom)
T_TABLE = {1: 12.7062047, 2: 4.3026527, 5: 2.5705818, 11: 2.2009852, 30: 2.0422725, 287: 1.9683}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_the_table(parity, df) -> None:
    assert parity.t_quantile(0.975, df) == pytest.approx(T_TABLE[df], abs=2e-4 if df == 287 else 1e-6)
    assert parity.t_quantile(0.025, df) == pytest.approx(-T_TABLE[df], abs=2e-4 if df == 287 else 1e-6)


def test_t_quantile_matches_scipy(parity) -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 3, 7, 19, 100):
        for p in (0.9, 0.95, 0.975, 0.995):
            assert parity.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)


def test_ratio_interval_is_t_on_the_log_ratios(parity) -> None:
    ratios = [1.028, 1.038, 0.940, 0.962, 0.929, 0.910, 0.898, 0.953]  # the rounds
    logs = np.log(ratios)
    mean, se = logs.mean(), logs.std(ddof=1) / math.sqrt(len(logs))
    t = 2.3646243  # t(0.975, 7), from a table
    summary = parity.ratio_summary(ratios)
    assert summary.count == 8
    assert summary.geometric_mean == pytest.approx(math.exp(mean), rel=1e-12)
    assert summary.low == pytest.approx(math.exp(mean - t * se), rel=1e-6)
    assert summary.high == pytest.approx(math.exp(mean + t * se), rel=1e-6)
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
    # ours:idle measures with the first protocol, after the idle
    assert bench.ours_sides("keep-alive,harness", idle_s=8.5) == {
        "ours": side_of("keep-alive"),
        "ours:harness": side_of("harness"),
        "ours:idle": side_of("keep-alive", 8.5),
    }
    for bad in ("", "harness,harness", "pipelined"):
        with pytest.raises(argparse.ArgumentTypeError, match="--ours-connection"):
            bench.ours_sides(bad)
    for bad_idle in (0.0, -1.0, 601.0):
        with pytest.raises(argparse.ArgumentTypeError, match="--ours-idle-s"):
            bench.ours_sides("harness", idle_s=bad_idle)

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


def test_core_mhz_reads_each_processor(parity) -> None:
    text = "processor\t: 0\ncpu MHz\t\t: 2596.1\n\nprocessor\t: 1\nmodel name\t: x\ncpu MHz\t\t: 3100.5\n"
    assert parity.core_mhz(text) == {0: 2596.1, 1: 3100.5}
    assert parity.core_mhz("processor\t: 0\n") == {}


def test_server_watch_finds_a_busy_thread_of_a_process_tree(tmp_path, load_benchmark) -> None:
    """A real process tree: a parent that sleeps and a child that spins; the watch names the spinning one."""
    bench = load_benchmark("tps_vs_harness_client")
    import subprocess
    import time

    spin = "import time\nend = time.time() + 4\nwhile time.time() < end: pass\n"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])"]
    )
    try:
        watch = bench.ServerWatch(parent.pid)
        began = time.perf_counter()
        time.sleep(0.5)  # the child has started
        while time.perf_counter() - began < 3.0:
            watch(time.perf_counter() - began)
            time.sleep(0.5)
        top = watch.summary()
    finally:
        parent.wait(timeout=30)
    assert top["name"].startswith("python")
    assert top["tid"] != parent.pid  # the child's thread, not the sleeping parent's
    assert 0.5 < top["mean_share"] <= 1.05
    assert abs(sum(top["cores"].values()) - 1.0) < 1e-9
    assert all(0 <= int(c) < os.cpu_count() for c in top["cores"])
    assert "on CPU" in bench.describe_thread({"server_busiest_thread": top})
    assert bench.ServerWatch(None).summary() == {}


def test_hold_server_cpu_list(load_benchmark) -> None:
    hold = load_benchmark("hold_server")
    allowed = sorted(os.sched_getaffinity(0))
    assert hold.cpu_list(str(allowed[0])) == {allowed[0]}
    assert hold.cpu_list(f"{allowed[0]}-{allowed[0]}") == {allowed[0]}
    if len(allowed) > 1 and allowed[1] == allowed[0] + 1:
        assert hold.cpu_list(f"{allowed[0]}-{allowed[1]}") == {allowed[0], allowed[1]}
    assert hold.cpu_list(",".join(map(str, allowed))) == set(allowed)
    for bad in ("x", "1-", "", "3-1", str(max(allowed) + 64)):
        with pytest.raises(argparse.ArgumentTypeError):
            hold.cpu_list(bad)


def test_adjusted_ratio_is_the_intercept_of_a_least_squares_line(parity) -> None:
    """Against numpy's least squares and the textbook standard error of an intercept."""
    ratios = [1.040, 1.083, 0.993, 1.061, 1.097, 1.012]
    covariate = [-0.030, -0.061, 0.004, -0.048, -0.070, -0.010]
    fit = parity.adjusted_ratio(ratios, covariate)
    ys, xs = np.log(ratios), np.asarray(covariate)
    design = np.column_stack([np.ones_like(xs), xs])
    (intercept, slope), *_ = np.linalg.lstsq(design, ys, rcond=None)
    residuals = ys - design @ np.array([intercept, slope])
    sigma2 = residuals @ residuals / (len(ys) - 2)
    se = math.sqrt(sigma2 * np.linalg.inv(design.T @ design)[0, 0])
    t = 2.7764451  # t(0.975, 4), from a table
    assert fit.count == 6
    assert fit.slope == pytest.approx(slope, rel=1e-9)
    assert fit.adjusted == pytest.approx(math.exp(intercept), rel=1e-9)
    assert fit.low == pytest.approx(math.exp(intercept - t * se), rel=1e-6)
    assert fit.high == pytest.approx(math.exp(intercept + t * se), rel=1e-6)
    assert fit.residual_sd == pytest.approx(math.sqrt(sigma2), rel=1e-9)
    assert "interval" in fit.describe()


def test_adjusted_ratio_recovers_a_ratio_hidden_by_the_host(parity) -> None:
    """Ratios that a host state moves by 20 %, and a covariate that sees the state: the true 1.01 comes back."""
    rng = random.Random(5)
    covariate = [rng.uniform(-0.2, 0.2) for _ in range(8)]
    ratios = [1.01 * math.exp(-1.1 * c + rng.gauss(0, 0.003)) for c in covariate]
    raw = parity.ratio_summary(ratios)
    fit = parity.adjusted_ratio(ratios, covariate)
    assert fit.low < 1.01 < fit.high
    assert fit.high - fit.low < 0.02 < raw.high - raw.low
    assert fit.slope == pytest.approx(-1.1, abs=0.05)


def test_adjusted_ratio_needs_three_pairs_and_a_moving_covariate(parity) -> None:
    assert parity.adjusted_ratio([1.0, 1.1], [0.1, 0.2]).adjusted is None
    assert parity.adjusted_ratio([1.0, 1.1, 1.2], [0.1, 0.1, 0.1]).adjusted is None
    assert "no adjusted figure" in parity.adjusted_ratio([1.0, 1.1], [0.1, 0.2]).describe()
    with pytest.raises(ValueError):
        parity.adjusted_ratio([1.0, 1.1, 1.2], [0.1, 0.2])
    with pytest.raises(ValueError):
        parity.adjusted_ratio([1.0, 0.0, 1.2], [0.1, 0.2, 0.3])


def test_request_starts_backwards_and_probe_windows(parity, tmp_path) -> None:
    starts = parity.request_starts_backwards(100.0, 10.0, [2.0, 3.0, 4.0])  # 1 s between: 1/3 s a request
    assert starts == pytest.approx([90.0, 90.0 + 2.0 + 1 / 3, 90.0 + 5.0 + 2 / 3])
    assert starts[-1] + 4.0 + 1 / 3 == pytest.approx(100.0)
    assert parity.request_starts_backwards(5.0, 1.0, []) == []
    log = tmp_path / "probe.jsonl"
    log.write_text(
        '{"t": 10.0, "cpu_ms": 1.0}\n{"t": 11.0, "cpu_ms": 2.0, "gpu_ms": 0.5}\n'
        '{"t": 12.0, "cpu_ms": 4.0}\n{"t": 13.0, "cpu'
    )  # a torn last line, still being written
    lines = parity.load_probe(log)
    assert len(lines) == 3
    assert parity.probe_mean(lines, "cpu_ms", 10.5, 12.0) == pytest.approx(3.0)
    assert parity.probe_mean(lines, "gpu_ms", 0.0, 20.0) == pytest.approx(0.5)
    assert parity.probe_mean(lines, "cpu_ms", 20.0, 30.0) is None


def test_host_state_is_the_probes_median_and_quartiles_in_a_window(parity) -> None:
    rng = random.Random(7)
    quiet = [{"t": 100.0 + i, "cpu_ms": 0.77 + rng.gauss(0, 0.01), "mem_ms": 4.0} for i in range(60)]
    busy = [{"t": 160.0 + i, "cpu_ms": rng.choice([1.1, 1.9]) + rng.gauss(0, 0.05)} for i in range(40)]
    lines = [*quiet, *busy, {"t": 300.0, "mem_ms": 3.0}]  # a line without cpu_ms counts for nothing
    for start, end, chosen in ((None, 159.5, quiet), (160.0, None, busy), (None, None, quiet + busy)):
        state = parity.host_state(lines, start=start, end=end)
        values = [line["cpu_ms"] for line in chosen]
        assert state.seconds == len(values)
        assert (state.low_quartile_cpu_ms, state.median_cpu_ms, state.high_quartile_cpu_ms) == pytest.approx(
            tuple(np.percentile(values, [25, 50, 75]))
        )
        assert state.quiet == (float(np.median(values)) < 1.0)
    assert parity.host_state(lines, end=159.5).quiet and not parity.host_state(lines, start=160.0).quiet
    assert parity.host_state(lines, end=159.5, quiet_cpu_ms=0.5).quiet is False
    assert parity.host_state(lines, start=1000.0) is None and parity.host_state([]) is None
    one = parity.host_state([{"t": 1.0, "cpu_ms": 0.9}])
    assert (one.seconds, one.median_cpu_ms, one.low_quartile_cpu_ms, one.quiet) == (1, 0.9, 0.9, True)
    assert (
        parity.host_state(lines, end=159.5)
        .describe()
        .endswith(
            "(quartiles {:.3f} and {:.3f}, 60 s): a quiet host".format(
                *np.percentile([line["cpu_ms"] for line in quiet], [25, 75])
            )
        )
    )


def test_a_runs_timed_window_runs_from_its_first_start_to_its_last_end(load_benchmark) -> None:
    bench = load_benchmark("tps_vs_harness_client")
    row = {"request_starts_unix": [100.0, 101.5, 103.0], "latencies_s": [1.4, 1.4, 2.25]}
    assert bench.timed_window(row) == (100.0, 105.25)
    assert bench.timed_window({"latencies_s": [1.0]}) is None  # a run whose request times are not known


def test_size_summary_adjusts_by_the_probe(load_benchmark) -> None:
    bench = load_benchmark("tps_vs_harness_client")

    def side(tps: float, cpu_ms: float) -> dict:
        return {
            "ok": True,
            "tps": tps,
            "output_lens": [32],
            "input_lens": [16],
            "probe": {"cpu_ms": cpu_ms},
            "server": {"requests": 5.0, "e2e_s": 5.0 / tps, "decode_s": 4.0 / tps},
        }

    rounds = [
        {"harness": side(100.0, 1.00), "ours": side(110.0, 0.90)},
        {"harness": side(100.0, 1.00), "ours": side(95.0, 1.05)},
        {"harness": side(90.0, 1.10), "ours": side(99.0, 1.00)},
        {"harness": side(100.0, 1.00), "ours": side(101.0, 1.00)},
    ]
    summary = bench.size_summary(rounds)
    fit = summary["adjusted"]["cpu_ms"]
    assert set(summary["adjusted"]) == {"cpu_ms"}  # no gpu_ms or mem_ms in these records
    assert fit["covariate"] == pytest.approx([math.log(0.9), math.log(1.05), math.log(1 / 1.1), 0.0])
    expected = load_benchmark("parity").adjusted_ratio(summary["ratios"], fit["covariate"])
    assert fit["adjusted"] == pytest.approx(expected.adjusted) and fit["slope"] == pytest.approx(expected.slope)
    assert "adjusted" not in bench.size_summary([{k: {**v, "probe": {}} for k, v in r.items()} for r in rounds])


def test_host_probe_writes_a_line_a_second_and_stops_on_sigterm(tmp_path) -> None:
    """The real probe, briefly, without the GPU: its lines, its figures, its exit at SIGTERM."""
    import signal
    import subprocess
    import time

    out = tmp_path / "probe.jsonl"
    cpu = sorted(os.sched_getaffinity(0))[-1]
    probe = subprocess.Popen(
        [
            sys.executable,
            str(BENCHMARKS / "host_probe.py"),
            "--out",
            str(out),
            "--cpus",
            str(cpu),
            "--interval-s",
            "0.05",
            "--no-gpu",
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 2):
            time.sleep(0.2)
        began = time.time()
    finally:
        probe.send_signal(signal.SIGTERM)
        code = probe.wait(timeout=30)
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) >= 2
    for line in lines:
        assert set(line) == {"t", "cpu_ms", "mem_ms", "n"}
        assert line["t"] <= began + 1 and line["n"] >= 1
        assert 0 < line["cpu_ms"] < 1000 and 0 < line["mem_ms"] < 5000
    assert [line["t"] for line in lines] == sorted(line["t"] for line in lines)
