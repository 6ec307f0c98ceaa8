"""benchmarks/noise_split.py: the arm and size syntax, and its summary against numpy on records of known shape."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def noise_split(load_benchmark):
    return load_benchmark("noise_split", "noise_split_under_test")


def test_arms_parse_and_bad_arms_say_which_part(noise_split) -> None:
    arm = noise_split.parse_arm("w16:shape=trial:SLIDING_WINDOW=16")
    assert (arm.label, arm.shape, dict(arm.overrides)) == ("w16", "trial", {"SLIDING_WINDOW": "16"})
    assert noise_split.parse_arm("base").shape == "rerun"
    with pytest.raises(argparse.ArgumentTypeError, match="'SLIDING_WINDOW' is not KEY=VALUE"):
        noise_split.parse_arm("w:SLIDING_WINDOW")
    with pytest.raises(argparse.ArgumentTypeError, match="shape must be one of"):
        noise_split.parse_arm("w:shape=night")
    assert noise_split.parse_sizes("8x128, 128x512") == ((8, 128), (128, 512))
    with pytest.raises(argparse.ArgumentTypeError, match="'8by128' is not PROMPTSxTOKENS"):
        noise_split.parse_sizes("8by128")
    assert noise_split.runs_per_size(noise_split.parse_runs("6,2"), ((8, 128), (128, 512))) == (6, 2)
    assert noise_split.runs_per_size(noise_split.parse_runs("3"), ((8, 128), (128, 512))) == (3, 3)
    with pytest.raises(argparse.ArgumentTypeError, match="at least 2 runs"):
        noise_split.parse_runs("6,1")
    with pytest.raises(argparse.ArgumentTypeError, match="3 counts for 2 sizes"):
        noise_split.runs_per_size((2, 2, 2), ((8, 128), (128, 512)))


def _records(rng: np.random.Generator) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Two arms x 5 servers x 4 runs, interleaved in time; arm b is 1.2x arm a; a drift of 0.1/h."""
    records, logs = [], {"a": np.zeros((5, 4)), "b": np.zeros((5, 4))}
    clock = 0.0
    for server in range(1, 6):
        for arm, level in (("a", math.log(100.0)), ("b", math.log(120.0))):
            offset = rng.normal(0, 0.08)
            phases = {"spawn": 20.0, "engine init": 15.0 + server, "api ready": 5.0}
            records.append(
                {"kind": "server", "arm": arm, "server": server, "ready_s": 40.0 + server, "start_phases": phases}
            )
            for run in range(4):
                clock += 30.0
                value = level + offset + rng.normal(0, 0.04) + 0.1 * clock / 3600
                logs[arm][server - 1, run] = value
                at = 1.0e9 + clock
                run_line = {"kind": "run", "arm": arm, "server": server, "run": run + 1, "sizes": [8, 128]}
                records.append(run_line | {"at_epoch": at, "tps": math.exp(value)})
    return records, logs


def test_summary_matches_numpy(noise_split, tmp_path) -> None:
    records, logs = _records(np.random.default_rng(7))
    path = tmp_path / "noise_split.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = noise_split.summarize(noise_split.read_records(path))

    for row in summary["splits"]:
        data = logs[row["arm"]]
        within = math.sqrt(((data - data.mean(axis=1, keepdims=True)) ** 2).sum() / (data.size - data.shape[0]))
        means_var = data.mean(axis=1).var(ddof=1)
        between = math.sqrt(max(0.0, means_var - within**2 / data.shape[1]))
        assert row["split"]["within"] == pytest.approx(within, rel=1e-9)
        assert row["split"]["between"] == pytest.approx(between, rel=1e-9)
        offset = np.mean(data[:, 0] - data[:, 1:].mean(axis=1))
        assert row["first_run_offset"] == pytest.approx(offset, rel=1e-9)
        assert row["mean_tps"] == pytest.approx(math.exp(data.mean()), rel=1e-9)

    # the drift inside servers: numpy's least squares on the runs' offsets from their server's mean
    times = [r["at_epoch"] for r in records if r["kind"] == "run" and r["arm"] == "a"]
    data = logs["a"]
    inside = (data - data.mean(axis=1, keepdims=True)).ravel()
    slope = np.polyfit(np.array(times), inside, 1)[0] * 3600
    row_a = next(r for r in summary["splits"] if r["arm"] == "a")
    assert row_a["drift_inside"][0] == pytest.approx(slope, rel=1e-6)
    assert row_a["drift_inside"][1] < 0.1 < row_a["drift_inside"][2]

    (pair,) = summary["pairs"]
    ratios = np.exp(logs["a"].mean(axis=1) - logs["b"].mean(axis=1))
    assert pair["pair_ratios"] == pytest.approx(list(ratios), rel=1e-9)
    assert pair["ratio"] == pytest.approx(math.exp(np.log(ratios).mean()), rel=1e-9)
    assert pair["low"] < 1 / 1.2 < pair["high"]

    (start_a, start_b) = summary["starts"]
    assert start_a["ready_s"] == pytest.approx(43.0)
    assert start_a["phases"]["engine init"] == pytest.approx(18.0)
    lines = noise_split.summary_lines(summary)
    assert lines[2].startswith("a 8x128: 5 servers x 4 runs")
    assert lines[-1].startswith("a / b at 8x128: ")
