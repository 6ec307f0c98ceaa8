"""The search benchmark's landscape families and its figures, checked against independent computations."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("search_efficiency")


def test_each_family_moves_what_it_says(bench) -> None:
    for seed in range(6):
        assert 400 <= bench.family_shape("gate-wide", seed).boundary <= 500
        flat = bench.NoisyLandscape(seed, noise=0.0, ppl_noise=0.0, shape=bench.family_shape("flat-window", seed))
        windows = np.arange(128, 513, 4)
        at = flat.true_tps(windows, 48, 4)
        assert at.max() / at.min() - 1 < 0.011  # the window moves TPS by at most about 1 %
    best_k = [
        bench.NoisyLandscape(s, noise=0, ppl_noise=0, shape=bench.family_shape("cheap-drafter", s)) for s in range(6)
    ]
    plain = [bench.NoisyLandscape(s, noise=0, ppl_noise=0, shape=bench.family_shape("challenge", s)) for s in range(6)]
    assert statistics.median(x.best["num_speculative_tokens"] for x in best_k) > statistics.median(
        x.best["num_speculative_tokens"] for x in plain
    )
    assert statistics.median(x.best["centroid_top_k"] for x in best_k) > statistics.median(
        x.best["centroid_top_k"] for x in plain
    )
    names = bench.family_space("extra-knob").names
    assert "max_num_seqs" in names and "max_num_batched_tokens" in names
    assert "max_num_batched_tokens" not in bench.family_space("challenge").names


def test_ppl_readings_are_noisy_around_the_truth(bench) -> None:
    shape = bench.family_shape("challenge", 3)
    land = bench.NoisyLandscape(3, noise=0.05, ppl_noise=0.01, shape=shape)
    params = {"sliding_window": 300, "centroid_top_k": 48, "num_speculative_tokens": 4}
    readings = [land(params).ppl for _ in range(400)]
    truth = float(land.ppl(300))
    assert abs(statistics.fmean(readings) - truth) < 4 * 0.01 / 20
    assert 0.008 < statistics.stdev(readings) < 0.012


def test_quantiles_rank_unreached_runs_last(bench) -> None:
    values = [3, 9, None, 5, 7, 4, 6, 8, 12, 10]
    reached = sorted(v for v in values if v is not None)
    # statistics' inclusive method is the linear interpolation between order statistics
    assert bench.quantile_text(reached, 0.5, 40) == f"{statistics.median(reached):g}"
    assert bench.quantile_text(reached, 0.9, 40) == f"{statistics.quantiles(reached, n=10, method='inclusive')[8]:g}"
    assert bench.quantile_text(values, 0.9, 40) == ">40"  # the 90th percentile falls on the unreached run
    assert bench.quantile_text(values, 0.5, 40) == f"{statistics.median([*reached, 10**9]):g}"


def test_the_summary_ranks_unreached_runs_last(bench) -> None:
    """A 90th percentile between a reached and an unreached run is over the cap, not NaN (it read 'nan')."""
    cell = bench.Cell(family="challenge", enqueue=False, noise=0.1, ppl_noise=0.02)

    def outcome(searched):
        return bench.Outcome(searched=searched, races=0, dwell=3, dwell_window=256, windows=2, seconds=1.0)

    # eight reached and two not: numpy's linear 90th percentile sits between the two unreached (inf - inf)
    runs = [outcome(v) for v in (1, 2, 3, 4, 5, 6, 7, 8)] + [outcome(None), outcome(None)]
    text = bench.summary_text(0.1, [(cell, runs)], 40)
    assert "worst median 5.5 searched trials" in text
    assert "worst 90th percentile >40" in text


def test_a_table_from_records_names_the_seeds_and_cap_they_ran_with(bench, tmp_path, capsys) -> None:
    """The caption read 'seeds 0-19' and 'a cap of 40' (this command's defaults) for records of 8
    seeds; records at seeds 20 and over were left out of the table."""
    cell = bench.Cell(family="challenge", enqueue=False, noise=0.05, ppl_noise=0.01)
    lines = []
    for seed, searched in ((21, 6), (22, None), (24, 9)):
        outcome = bench.Outcome(searched=searched, races=2, dwell=4, dwell_window=256, windows=3, seconds=1.5)
        lines.append(json.dumps({**bench._record(cell, seed, outcome), "cap": 30}))
    records = tmp_path / "runs.jsonl"
    records.write_text("\n".join(lines) + "\n")
    assert bench.main(["--from-records", str(records)]) == 0
    out = capsys.readouterr().out
    assert "a cap of 30 searched trials; seeds 21, 22, 24)" in out
    row = next(line for line in out.splitlines() if line.startswith("| 5% / 0.01 | challenge | no |"))
    assert row.split(" | ")[3] == "3"  # all three seeds counted
    assert "2/3 within 30" in row
    assert "4 s of runs in the records shown" in out  # 4.5 s, rounded
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(lines[0] + "\n" + lines[1].replace('"cap": 30', '"cap": 40') + "\n")
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--from-records", str(mixed)])
    assert stopped.value.code == 2


def test_the_windows_runs_dwelt_at_are_told_apart_by_the_truth(bench) -> None:
    # the truth computed here configuration by configuration, against dwell_place's grid at once
    def expected(family, seed, window):
        land = bench.Landscape(seed, shape=bench.family_shape(family, seed))
        if float(land.ppl(window)) > bench.PPL_CAP:
            return bench.DwellPlace.OVER_CAP
        fastest = max(
            land.tps_of({"sliding_window": window, "centroid_top_k": int(c), "num_speculative_tokens": int(k)})
            for c in range(16, 129)
            for k in range(1, 9)
        )
        return bench.DwellPlace.NEAR_BEST if fastest >= 0.99 * land.best_tps else bench.DwellPlace.NOTHING_NEAR

    land = bench.Landscape(6, shape=bench.family_shape("challenge", 6))
    best = land.best["sliding_window"]
    cases = [("challenge", 6, w) for w in (best, best + 28, 512, best - 8, 128)] + [("gate-wide", 2, 480)]
    places = [bench.dwell_place(*case) for case in cases]
    assert places == [expected(*case) for case in cases]
    assert set(places) == set(bench.DwellPlace)  # each kind of place among the cases

    cell = bench.Cell(family="challenge", enqueue=False, noise=0.05, ppl_noise=0.01)
    other = bench.Cell(family="challenge", enqueue=False, noise=0.1, ppl_noise=0.02)

    def dwelt(dwell, window):
        return bench.Outcome(searched=9, races=0, dwell=dwell, dwell_window=window, windows=3, seconds=1.0)

    runs = [(cell, 6, dwelt(9, best)), (cell, 6, dwelt(12, 512)), (cell, 6, dwelt(8, 512)), (other, 6, dwelt(20, 128))]
    # the line counts this noise's runs over 8 only: at the best's window and at 512, not the dwell of 8
    near, nothing = expected("challenge", 6, best), expected("challenge", 6, 512)
    assert (near, nothing) == (bench.DwellPlace.NEAR_BEST, bench.DwellPlace.NOTHING_NEAR)
    assert bench.dwell_text(0.05, runs) == (
        "5% TPS noise, 2 runs dwelling over 8 searched trials at one window: "
        "a configuration within 1 % there in 1, nothing within 1 % in 1, PPL over the cap in 0"
    )


def test_enqueue_both_shows_the_cells_with_and_without_known_configurations(bench, tmp_path, capsys) -> None:
    """``--enqueue both`` (the help's word) ran the cells without known configurations only."""
    lines = []
    for enqueue in (False, True):
        cell = bench.Cell(family="challenge", enqueue=enqueue, noise=0.05, ppl_noise=0.01)
        outcome = bench.Outcome(searched=7, races=2, dwell=3, dwell_window=256, windows=3, seconds=1.0)
        lines.append(json.dumps(bench._record(cell, 0, outcome)))
    records = tmp_path / "runs.jsonl"
    records.write_text("\n".join(lines) + "\n")
    for words, shown in (("both", ["no", "yes"]), ("no,yes", ["no", "yes"]), ("yes", ["yes"]), ("no", ["no"])):
        assert bench.main(["--from-records", str(records), "--families", "challenge", "--enqueue", words]) == 0
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 5% / 0.01 | challenge |")]
        assert [row.split(" | ")[2] for row in rows] == shown, words
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--from-records", str(records), "--enqueue", "always"])
    assert stopped.value.code == 2
    assert "--enqueue: 'always' is not one of no, yes, both" in capsys.readouterr().err
