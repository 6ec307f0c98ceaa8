"""Whole-run parity pooled over sessions (``benchmarks/pool_parity.py``) and the rounds on record."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RECORD = BENCHMARKS / "results" / "gpu-parity-rounds.csv"


@pytest.fixture(scope="module")
def pool_parity(load_benchmark):
    return load_benchmark("pool_parity")


def _t_interval(ratios: list[float]) -> tuple[float, float, float]:
    logs = np.log(ratios)
    half = student_t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return math.exp(logs.mean()), math.exp(logs.mean() - half), math.exp(logs.mean() + half)


def _intercept_interval(ratios: list[float], covariate: list[float]) -> tuple[float, float, float]:
    """The intercept of log(ratio) on the covariate by numpy's least squares, with its t interval."""
    x = np.column_stack([np.ones(len(ratios)), covariate])
    y = np.log(ratios)
    coef, residual, *_ = np.linalg.lstsq(x, y, rcond=None)
    sigma2 = float(residual[0]) / (len(y) - 2)
    se = math.sqrt(sigma2 * np.linalg.inv(x.T @ x)[0, 0])
    half = student_t.ppf(0.975, len(y) - 2) * se
    return math.exp(coef[0]), math.exp(coef[0] - half), math.exp(coef[0] + half)


def _result_file(path: Path, sides: list[tuple[float, float, float | None, float | None]]) -> Path:
    """A result file laid out as tps_vs_harness_client.py writes it: (harness, ours, probe H, probe O) a round.

    Each side's server counters make its server time per request 64000 / TPS ms (132 requests).
    """

    def side(tps: float, probe: float | None) -> dict:
        served = {"requests": 132.0, "e2e_s": 132 * 64.0 / tps} if tps > 0 else {}
        return {
            "ok": tps > 0,
            "tps": tps,
            "probe": {"cpu_ms": probe, "mem_ms": None} if probe else {},
            "server": served,
        }

    rounds = []
    for number, (harness, ours, probe_h, probe_o) in enumerate(sides):
        order = ["harness", "ours"] if number % 2 == 0 else ["ours", "harness"]
        rounds.append(
            {
                "round": number,
                "first": order[0],
                "order": order,
                "harness": side(harness, probe_h),
                "ours": side(ours, probe_o),
            }
        )
    path.write_text(
        json.dumps(
            {
                "began": "2026-12-02 18:55:06",
                "ours_connection": "harness",
                "sizes": {"128x512": {"rounds": rounds, "summary": {}}},
            }
        )
    )
    return path


def test_the_record_pools_to_the_figures_an_independent_computation_gives(pool_parity) -> None:
    with RECORD.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    pinned = [
        r for r in rows if r["size"] == "128x512" and r["server_cpus"] == "2-5" and r["ours_connection"] == "harness"
    ]
    ratios = [float(r["ours_tps"]) / float(r["harness_tps"]) for r in pinned]
    rounds = pool_parity.select(
        pool_parity.load_record(RECORD), size="128x512", server_cpus="2-5", ours_connection="harness"
    )
    assert [r.ratio for r in rounds] == pytest.approx(ratios)
    result = pool_parity.pool(rounds)
    mean, low, high = _t_interval(ratios)
    assert (result.pooled.geometric_mean, result.pooled.low, result.pooled.high) == pytest.approx((mean, low, high))
    # the figures docs/measurement.md states for the 39 pinned pairs of 2026-12-02 to 2026-12-04
    assert len(ratios) == 39 and (round(mean, 4), round(low, 4), round(high, 4)) == (1.0086, 0.9872, 1.0305)
    stated = {"cpu_ms": (34, (0.996, 0.977, 1.016)), "mem_ms": (31, (0.999, 0.978, 1.021))}
    for probe, (count, figures) in stated.items():
        probed = [r for r in pinned if r[f"probe_{probe}_harness"]]
        covariate = [math.log(float(r[f"probe_{probe}_ours"]) / float(r[f"probe_{probe}_harness"])) for r in probed]
        expected = _intercept_interval([float(r["ours_tps"]) / float(r["harness_tps"]) for r in probed], covariate)
        fit = result.adjusted[probe]
        assert fit.count == count and (fit.adjusted, fit.low, fit.high) == pytest.approx(expected)
        assert tuple(round(value, 3) for value in expected) == figures
    assert set(result.by_run) == {
        "2026-12-02T11:06Z",
        "2026-12-02T14:37Z",
        "2026-12-02T18:43Z",
        "2026-12-02T21:23Z",
        "2026-12-03T00:40Z",
        "2026-12-03T01:04Z",
        "2026-12-03T09:12Z",
        "2026-12-03T11:45Z",
        "2026-12-03T12:13Z",
        "2026-12-03T14:09Z",
        "2026-12-04T03:36Z",
    }


def test_the_record_split_by_host_gives_the_figures_the_docs_state(pool_parity) -> None:
    with RECORD.open(newline="") as handle:
        rows = [
            r
            for r in csv.DictReader(handle)
            if r["size"] == "128x512" and r["server_cpus"] == "2-5" and r["ours_connection"] == "harness"
        ]
    logs_by_run: dict[str, list[float]] = {}
    for r in rows:
        if r["probe_cpu_ms_harness"]:
            logs_by_run.setdefault(r["run"], []).append(
                0.5 * (math.log(float(r["probe_cpu_ms_harness"])) + math.log(float(r["probe_cpu_ms_ours"])))
            )
    host = {run: math.exp(sum(logs) / len(logs)) for run, logs in logs_by_run.items()}
    classes = {"quiet": [], "busy": [], "no probe": []}
    for r in rows:
        name = "no probe" if r["run"] not in host else "quiet" if host[r["run"]] < 1.0 else "busy"
        classes[name].append(float(r["ours_tps"]) / float(r["harness_tps"]))
    result = pool_parity.pool(
        pool_parity.select(
            pool_parity.load_record(RECORD), size="128x512", server_cpus="2-5", ours_connection="harness"
        )
    )
    assert result.host_cpu_ms == pytest.approx({**host, "2026-12-02T11:06Z": None})
    for name, ratios in classes.items():
        summary = result.by_host[name]
        assert summary.count == len(ratios)
        assert (summary.geometric_mean, summary.low, summary.high) == pytest.approx(_t_interval(ratios))
    # as docs/measurement.md states them: the one quiet host, 7 pairs; the busy ones, 27
    stated = {"quiet": (7, 0.999, 0.990, 1.008), "busy": (27, 1.003, 0.973, 1.033)}
    for name, (count, *figures) in stated.items():
        summary = result.by_host[name]
        assert (summary.count, *(round(v, 3) for v in (summary.geometric_mean, summary.low, summary.high))) == (
            count,
            *figures,
        )
    assert (
        round(host["2026-12-03T00:40Z"], 2) == 0.77
        and min(v for k, v in host.items() if k != "2026-12-03T00:40Z") > 1.2
    )


def test_the_ratio_at_equal_server_time_is_the_tps_ratio_times_the_server_time_ratio(pool_parity) -> None:
    with RECORD.open(newline="") as handle:
        rows = [
            r
            for r in csv.DictReader(handle)
            if r["size"] == "128x512" and r["server_cpus"] == "2-5" and r["ours_connection"] == "harness"
        ]
    timed = [r for r in rows if r["server_e2e_ms_harness"]]
    server = [float(r["server_e2e_ms_ours"]) / float(r["server_e2e_ms_harness"]) for r in timed]
    tps = [float(r["ours_tps"]) / float(r["harness_tps"]) for r in timed]
    # a run's wall time is the server's own time plus what lies outside it: TPS ours / harness times
    # the server's time ratio leaves the outside shares' ratio, the clients' and the API path's part
    # (the same tokens on both sides, so the wall times' ratio D_O / D_H is 1 / tps; E_O / E_H is server)
    outside = [(1 / t) / s for t, s in zip(tps, server)]  # (D_O / E_O) / (D_H / E_H), inverted below
    result = pool_parity.pool(
        pool_parity.select(
            pool_parity.load_record(RECORD), size="128x512", server_cpus="2-5", ours_connection="harness"
        )
    )
    equal = result.at_equal_server_time
    assert equal.count == len(timed) == 33
    assert (equal.geometric_mean, equal.low, equal.high) == pytest.approx(_t_interval([1 / o for o in outside]))
    assert (result.server_time.geometric_mean, result.server_time.low, result.server_time.high) == pytest.approx(
        _t_interval(server)
    )
    # as docs/measurement.md states them: the clients' part within 0.05 %, the server's time moving by 6 %
    assert tuple(round(v, 4) for v in (equal.geometric_mean, equal.low, equal.high)) == (0.9997, 0.9995, 0.9999)
    assert round(equal.log_sd, 4) == 0.0007 and round(result.server_time.log_sd, 3) == 0.063
    assert tuple(
        round(v, 4) for v in (result.server_time.geometric_mean, result.server_time.low, result.server_time.high)
    ) == (0.9874, 0.9655, 1.0098)
    # the one quiet host's rounds, 00:40, by their docs table: 442.0 and 440.3 ms in round 0
    first = next(r for r in pool_parity.load_record(RECORD) if r.run == "2026-12-03T00:40Z" and r.round == 0)
    assert first.server_e2e_ms == (442.0, 440.3)
    assert first.ratio_at_equal_server_time == pytest.approx(1125.15 / 1121.57 * 440.3 / 442.0, rel=1e-4)


def test_a_record_without_the_server_columns_still_loads(pool_parity, tmp_path) -> None:
    record = tmp_path / "old.csv"
    columns = [name for name in pool_parity.FIELDS if name not in pool_parity.SERVER_FIELDS]
    record.write_text(",".join(columns) + "\nR,128x512,0,harness,2-5,harness,500,510,,,,,,\n")
    (only,) = pool_parity.load_record(record)
    assert only.server_e2e_ms is None and only.ratio_at_equal_server_time is None
    result = pool_parity.pool([only])
    assert result.server_time is None and result.at_equal_server_time is None
    half = tmp_path / "half.csv"
    half.write_text(",".join(pool_parity.FIELDS) + "\nR,128x512,0,harness,2-5,harness,500,510,,,,,,,600,\n")
    with pytest.raises(pool_parity.RecordError, match=r"line 2: server_e2e_ms_ours is not a number"):
        pool_parity.load_record(half)


def test_the_quiet_cut_moves_a_run_between_classes(tmp_path) -> None:
    record = tmp_path / "rounds.csv"
    quiet = _result_file(tmp_path / "q.json", [(500.0, 505.0, 0.8, 0.8), (510.0, 500.0, 0.8, 0.9)])
    busy = _result_file(tmp_path / "b.json", [(400.0, 440.0, 1.5, 1.4), (420.0, 430.0, 1.6, 1.5)])
    for label, path in (("Q", quiet), ("B", busy)):
        assert (
            _cli("--record", str(record), "--add", f"{label}={path}", "--server-cpus", "2-5", "--save").returncode == 0
        )
    split = _cli("--record", str(record))
    mean, low, high = _t_interval([505 / 500, 500 / 510])
    assert (
        f"runs on quiet hosts (the probe's cpu_ms over the run under 1 ms): ours / harness {mean:.4f} "
        f"(95% interval {low:.4f} to {high:.4f}; 2 pairs" in split.stdout
    )
    assert (
        f"  Q: ours / harness {mean:.4f}" in split.stdout
        and f"host: probe cpu_ms {math.sqrt(math.sqrt(0.8 * 0.8 * 0.8 * 0.9)):.3f}, quiet" in split.stdout
    )
    together = _cli("--record", str(record), "--quiet-cpu-ms", "2")
    everything = _t_interval([505 / 500, 500 / 510, 440 / 400, 430 / 420])
    assert (
        f"runs on quiet hosts (the probe's cpu_ms over the run under 2 ms): ours / harness {everything[0]:.4f}"
        in together.stdout
    )
    assert "busy hosts" not in together.stdout
    bad = _cli("--record", str(record), "--quiet-cpu-ms", "0")
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "pool_parity: --quiet-cpu-ms must be a positive number of ms, not 0"
    )


def test_a_result_file_adds_its_complete_rounds_and_the_record_keeps_them(pool_parity, tmp_path) -> None:
    record = tmp_path / "rounds.csv"
    first = _result_file(
        tmp_path / "a.json",
        [(500.0, 510.0, 1.0, 0.9), (520.0, 0.0, 1.0, 1.0), (480.0, 470.0, 1.1, 1.2), (505.0, 515.0, 1.0, 1.05)],
    )
    added = pool_parity.rounds_from_result(first, run="A", server_cpus="2-5")
    assert [(r.round, r.first) for r in added] == [(0, "harness"), (2, "harness"), (3, "ours")]  # round 1 failed
    assert added[0].probe == {"cpu_ms": (1.0, 0.9)} and added[0].ratio == pytest.approx(510 / 500)
    assert added[0].server_e2e_ms == pytest.approx((64000 / 500, 64000 / 510))
    assert added[0].ratio_at_equal_server_time == pytest.approx(1.0)
    pool_parity.save_record(record, added)
    second = pool_parity.rounds_from_result(
        _result_file(tmp_path / "b.json", [(600.0, 590.0, None, None)]), run="B", server_cpus="any"
    )
    pool_parity.save_record(record, second)
    back = pool_parity.load_record(record)
    assert back == added + second and not (tmp_path / "rounds.csv.partial").exists()
    result = pool_parity.pool(back)
    assert result.pooled.geometric_mean == pytest.approx(_t_interval([510 / 500, 470 / 480, 515 / 505, 590 / 600])[0])
    assert set(result.adjusted) == {"cpu_ms"} and result.adjusted["cpu_ms"].count == 3
    only_b = pool_parity.select(back, size=None, server_cpus="any", ours_connection=None)
    assert [r.run for r in only_b] == ["B"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "pool_parity.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_adds_saves_and_refuses_a_run_twice(tmp_path) -> None:
    record = tmp_path / "rounds.csv"
    result = _result_file(
        tmp_path / "a.json", [(500.0, 510.0, 1.0, 0.9), (480.0, 470.0, 1.1, 1.2), (505.0, 515.0, 1.0, 1.05)]
    )
    saved = _cli("--record", str(record), "--add", f"A={result}", "--server-cpus", "2-5", "--save")
    assert saved.returncode == 0, saved.stderr
    mean, low, high = _t_interval([510 / 500, 470 / 480, 515 / 505])
    assert (
        f"pooled over 3 rounds of 1 runs: ours / harness {mean:.4f} (95% interval {low:.4f} to {high:.4f}"
        in saved.stdout
    )
    assert "3 rounds added" in saved.stdout
    again = _cli("--record", str(record), "--add", f"A={result}", "--server-cpus", "2-5", "--save")
    assert (
        again.returncode == 2
        and again.stderr.strip() == f"pool_parity: --add: the run 'A' is already on record in {record}"
    )
    assert len(record.read_text().splitlines()) == 4  # the header and the 3 rounds, once


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--add", "A"], "--add takes LABEL=FILE, not 'A'"),
        (["--add", "A=x.json"], "--add needs --server-cpus"),
        (["--size", "7x7"], "no rounds match: nothing to pool"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(tmp_path, args, message) -> None:
    run = _cli("--record", str(RECORD), *args)
    assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_a_broken_record_names_its_line(pool_parity, tmp_path) -> None:
    record = tmp_path / "rounds.csv"
    record.write_text(RECORD.read_text().splitlines()[0] + "\nR,128x512,0,harness,2-5,harness,500,-1,,,,,,\n")
    with pytest.raises(pool_parity.RecordError, match=r"line 2: ours_tps must be positive"):
        pool_parity.load_record(record)
    (tmp_path / "not.json").write_text("{")
    run = _cli("--record", str(tmp_path / "none.csv"), "--add", f"A={tmp_path / 'not.json'}", "--server-cpus", "any")
    assert run.returncode == 2 and "not a result file of tps_vs_harness_client.py" in run.stderr
