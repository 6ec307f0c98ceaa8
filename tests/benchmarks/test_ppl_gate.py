"""The PPL-gate benchmark's own arithmetic: the Wilson interval, resuming from the log, and the
relative cap's records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def ppl_gate(load_benchmark):
    return load_benchmark("ppl_gate", "ppl_gate_under_test")


def test_the_wilson_interval(ppl_gate) -> None:
    low, high = ppl_gate.wilson(0, 200)
    assert low == 0.0 and high == pytest.approx(0.01884, abs=1e-4)  # 3.84 / (200 + 3.84)
    low, high = ppl_gate.wilson(69, 199)
    assert (low, high) == (pytest.approx(0.2843, abs=1e-3), pytest.approx(0.4147, abs=1e-3))
    assert ppl_gate.wilson(5, 10)[0] == pytest.approx(1 - ppl_gate.wilson(5, 10)[1])


def test_a_cut_run_resumes_from_its_log(ppl_gate, tmp_path: Path, capsys) -> None:
    log = tmp_path / "trap.jsonl"
    argv = ["trap", "--landscapes", "0", "--seeds", "1", "--ppl-noises", "0.002", "--trials", "4", "--log", str(log)]
    assert ppl_gate.main(argv) == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 2  # without and with the known configurations
    first = capsys.readouterr()
    assert "running 2" in first.err
    # a run cut off mid-line, then the same command: nothing is run again
    with log.open("a") as handle:
        handle.write('{"task": {"kind": "tr')
    assert ppl_gate.main(argv) == 0
    again = capsys.readouterr()
    assert "2 of 2 studies in the log; running 0" in again.err
    assert again.out.split("\n\n")[0] == first.out.split("\n\n")[0]  # the same table
    results = [json.loads(line)["result"] for line in lines]
    assert all(r["trials"] == 4 and r["edge"] == 188 for r in results)


def test_record_sensitivity_averages_one_over_the_tokens(ppl_gate) -> None:
    base = [(10.0, 10), (20.0, 10), (30.0, 20)]
    narrow = [(11.0, 10), (20.5, 10), (33.5, 20)]  # per token: +0.1, +0.05, +0.175
    s = ppl_gate.record_sensitivity(base, narrow)
    # the mean change per token: 5.0 / 40 = 0.125
    assert s == pytest.approx([0.8, 0.4, 1.4])
    assert sum(v * t for v, (_, t) in zip(s, base)) / 40 == pytest.approx(1.0)


def test_under_a_relative_cap_the_records_luck_cancels_and_the_rows_carry_the_rest(
    ppl_gate,
) -> None:
    """The base and a configuration read on the same drawn records: their ratio moves only
    by the spread of the records' own changes, which the paired standard error measures
    from the rows."""
    from sweeper.study._gate import paired_stderr, record_rows

    rng = np.random.default_rng(0)
    scores = [(float(t * (0.8 + 0.3 * rng.random())), int(t)) for t in rng.integers(20, 60, 48)]
    sensitivity = list(1 + 0.6 * rng.standard_normal(48))
    land = ppl_gate.EdgeLandscape(2, noise=0.01, ppl_noise=0.0, scores=scores, sensitivity=sensitivity)
    assert land.cap_rel == pytest.approx(ppl_gate.PPL_CAP / land.base_ppl)
    assert 1.04 < land.cap_rel < 1.06
    base = land({"sliding_window": 512, "centroid_top_k": 32, "num_speculative_tokens": 4})
    edge = land({"sliding_window": land.edge, "centroid_top_k": 49, "num_speculative_tokens": 7})
    # the rows are the reading (no reading noise) and the tuning records' luck cancels
    for measured in (base, edge):
        rows = measured.requests
        assert len(rows) == 128
        total = sum(r["nll"] for r in rows) / sum(r["tokens"] for r in rows)
        assert math.exp(total) == pytest.approx(measured.ppl, rel=1e-12)
    change = math.log(land.ppl(land.edge) / land.base_ppl)
    assert math.log(edge.ppl / base.ppl) == pytest.approx(change * land.tuning_sensitivity)
    assert base.ppl == pytest.approx(land.base_ppl * math.exp(land.tuning_shift), rel=1e-9)
    paired = paired_stderr(record_rows(edge.requests), record_rows(base.requests))
    assert paired is not None and paired[1] == 128
    s, tokens = np.array(land.sensitivity), np.array([r["tokens"] for r in base.requests])
    mean = (s * tokens).sum() / tokens.sum()
    expected = change * math.sqrt(((s - mean) ** 2 * tokens**2).sum() / 127 / 128) / tokens.mean()
    assert paired[0] == pytest.approx(expected, rel=1e-6)
    # the private re-run: its own records' changes
    assert land.rerun_ratio({"sliding_window": land.edge}) == pytest.approx(math.exp(change * land.rerun_sensitivity))


def test_an_absolute_task_keeps_the_key_it_had_before_relative_caps(ppl_gate) -> None:
    common = dict(noise=0.01, ppl_noise=0.002, trials=15, records=128, rerun_records=128, edge_offset=0.001)
    absolute = ppl_gate.Task("gate", 3, 3, 0.9, True, **common)
    assert "relative" not in json.loads(absolute.key())
    relative = ppl_gate.Task("gate", 3, 3, 0.9, True, relative=True, **common)
    assert json.loads(relative.key())["relative"] is True
