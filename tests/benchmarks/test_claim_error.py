"""The claim-error benchmark: its table agrees with a count of its own per-study records."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from scipy.stats import binomtest

N = 2  # studies per landscape: a few seconds each


@pytest.fixture(scope="module")
def claim_error(load_benchmark):
    # imported by its package name: the benchmark's worker processes (spawn) import it again
    return load_benchmark("claim_error")


def test_the_landscapes_and_the_servers(claim_error) -> None:
    null = claim_error.truth("null", 7)
    assert set(null) == set(range(claim_error.CONFIGURATIONS)) and set(null.values()) == {100.0}
    alt = claim_error.truth("alt", 7)
    assert sorted(alt.values())[-2:] == pytest.approx([110.0, 125.0]) and alt[0] == 100.0  # the base is never faster
    assert list(alt.values()).count(100.0) == claim_error.CONFIGURATIONS - 2
    assert {max(claim_error.truth("alt", s), key=claim_error.truth("alt", s).get) for s in range(40)} == set(
        range(1, claim_error.CONFIGURATIONS)
    )  # the 1.25x one lands anywhere but on the base
    a, b = (claim_error.NoisyServers(alt, 0.10, seed=3) for _ in range(2))
    figures = [a({"c": 0}).tps for _ in range(2000)]
    assert figures == [b({"c": 0}).tps for _ in range(2000)]  # seeded
    steps = [math.log(y / x) for x, y in zip(figures, figures[1:])]
    # a step between neighbours: the difference of two noises (SD 0.10 each) plus a drift step
    assert statistics.stdev(steps) == pytest.approx(math.sqrt(2 * 0.10**2 + 0.015**2), rel=0.1)


def test_the_exact_binomial_interval(claim_error) -> None:
    for hits, n in ((0, 510), (3, 170), (25, 510), (60, 60)):
        expected = binomtest(hits, n).proportion_ci(confidence_level=0.95, method="exact")
        assert claim_error.binomial_interval(hits, n) == pytest.approx((expected.low, expected.high))


def test_the_table_counts_what_the_records_say(claim_error, tmp_path: Path, capsys) -> None:
    records_file = tmp_path / "records.jsonl"
    code = claim_error.main(
        ["--settings", "demo", "--null", str(N), "--alt", str(N), "--noises", "0.15", "--records", str(records_file)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert len(records) == 2 * N and len({r["seed"] for r in records}) == 2 * N
    for r in records:
        assert r["servers"] >= r["budget"] == 8
        assert r["claim"] in ("faster", "indistinct", "base", "slower", "none")
        assert (r["faster"] is None) == (r["fast"] is None) == (r["landscape"] == "null")
    version = records[0]["version"]
    for landscape in ("null", "alt"):
        mine = [r for r in records if r["landscape"] == landscape]
        faster = sum(r["claim"] == "faster" for r in mine)
        right = sum(r["claim"] == "faster" and r["claimed"] == r["faster"] for r in mine)
        fast = sum(r["claim"] == "faster" and r["claimed"] == r["fast"] for r in mine)
        wrong = faster - right - fast
        low, high = binomtest(faster, N).proportion_ci(method="exact")
        shares = (f"{right / N:.1%}", f"{fast / N:.1%}") if landscape == "alt" else ("-", "-")
        row = (
            f"| demo (8 trials) | {landscape} | 15% | {version} | {N} | {faster / N:.1%} ({low:.1%}-{high:.1%}) "
            f"| {shares[0]} | {shares[1]} | {wrong / N:.1%} | {statistics.median(r['servers'] for r in mine):g} |"
        )
        assert row in printed.splitlines(), printed
    # printing from the records again gives the same table
    assert claim_error.main(["--from-records", str(records_file)]) == 0
    assert capsys.readouterr().out == printed
