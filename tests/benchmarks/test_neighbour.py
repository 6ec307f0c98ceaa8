"""benchmarks/neighbour.py's summary, against the round means and a t-interval computed here."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats


@pytest.fixture(scope="module")
def nb(load_benchmark):
    return load_benchmark("neighbour")


def _records() -> list[dict]:
    lines = [{"kind": "settings"}]
    figures = {
        1: ([100.0, 102.0], [98.0, 99.0, 97.0, 100.0], 40.0, 44.0),
        2: ([101.0, 103.0], [101.0, 99.5, 98.0, 102.0], 41.0, 46.0),
    }
    figures[3] = ([99.0, 98.0], [97.0, 96.0, 98.5, 96.5], 39.0, 43.0)
    for number, (alone, pair, alone_ready, pair_ready) in figures.items():
        lines.append({"kind": "ready", "round": number, "shape": "alone", "servers": 1, "all_ready_s": alone_ready})
        lines.append({"kind": "ready", "round": number, "shape": "pair", "servers": 2, "all_ready_s": pair_ready})
        lines += [{"kind": "run", "round": number, "shape": "alone", "server": 1, "tps": t} for t in alone]
        lines += [
            {"kind": "run", "round": number, "shape": "pair", "server": 1 + i // 2, "tps": t}
            for i, t in enumerate(pair)
        ]
    lines.append(
        {"kind": "run", "round": 3, "shape": "pair", "server": 2, "tps": None}
    )  # a failed run counts for nothing
    lines.append({"kind": "failed", "round": 4, "shape": "pair", "error": "out of memory"})
    return lines


def _gmean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def test_the_summary_pairs_each_round_s_means(nb) -> None:
    records = _records()
    summary = nb.summarize(records)
    logs = []
    for number in (1, 2, 3):
        runs = [r for r in records if r["kind"] == "run" and r["round"] == number and r["tps"]]
        alone = _gmean([r["tps"] for r in runs if r["shape"] == "alone"])
        pair = _gmean([r["tps"] for r in runs if r["shape"] == "pair"])
        logs.append(math.log(pair / alone))
        assert summary["rounds"][number - 1]["ratio"] == pytest.approx(pair / alone, rel=1e-12)
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert summary["ratio"] == pytest.approx(math.exp(mean), rel=1e-12)
    assert summary["interval"]["low"] == pytest.approx(math.exp(mean - half), rel=1e-9)
    assert summary["interval"]["high"] == pytest.approx(math.exp(mean + half), rel=1e-9)
    assert summary["start_share"] == pytest.approx((44 / 80 + 46 / 82 + 43 / 78) / 3, rel=1e-12)
    text = "\n".join(nb.summary_lines(summary))
    assert "TPS beside an idle neighbour / alone" in text and "3 rounds" in text


def test_the_summary_of_a_file_is_printed(nb, tmp_path, capsys) -> None:
    path = tmp_path / "neighbour.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    assert nb.main(["--summary", str(path)]) == 0
    assert "a pair's start over two alone starts: 0.55" in capsys.readouterr().out


def test_no_complete_round_says_so(nb) -> None:
    assert nb.summary_lines(nb.summarize([{"kind": "settings"}])) == ["no round with both shapes measured"]
