"""Checks that every output states one TPS figure for the study's answer.

Shared by tests/sweeper/cli (stored studies, no servers) and the real-vLLM end-to-end
runs in tests/sweeper/sweep and tests/sweeper/answer (loaded by path: the tests are not a
package). The figure is recomputed here from the stored trials, independently of
``sweeper.study``: the geometric mean of the answer's TPS figures measured after selection
(its confirmation trials, and the baseline's own trial when the answer is the base), else
of all of them. ``check_base_divides_to_the_claim`` recomputes the claim from the stored
rounds and checks that the base's figure shown beside it divides with the answer's to it.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WIDTH, MAX_LINES = 120, 6


def expected_tps(records: Iterable[Any], params: Mapping[str, Any]) -> float:
    """The answer's TPS after selection, from the stored trials of its configuration."""
    mine = [
        r
        for r in sorted(records, key=lambda r: r.number)
        if r.state == "complete" and r.feasible and r.tps is not None and r.tps > 0 and dict(r.params) == dict(params)
    ]
    after = [r.tps for r in mine if r.role.startswith("confirm") or "baseline" in r.role.split("+")]
    figures = after or [r.tps for r in mine]
    assert figures, f"no stored figure for {dict(params)}"
    return math.exp(sum(math.log(v) for v in figures) / len(figures))


def printed(text: str, pattern: str) -> list[tuple[float, int]]:
    """Every figure ``pattern``'s first group matches in ``text`` (multi-line), with its decimals."""
    found = []
    for match in re.finditer(pattern, text, flags=re.MULTILINE):
        figure = match.group(1)
        found.append((float(figure), len(figure.split(".")[1]) if "." in figure else 0))
    return found


def assert_one_figure(expected: float, figures: Sequence[tuple[float, int]], where: str) -> None:
    """Each printed figure is ``expected`` as rounded to the decimals it is printed with."""
    assert figures, f"{where}: the answer's TPS is not printed"
    for value, decimals in figures:
        assert abs(value - expected) <= 0.5 * 10**-decimals + 1e-9, f"{where}: {value} is not {expected:.4f}"


def check_closing_block(text: str) -> list[str]:
    """``sweeper run``'s closing block: at most 6 lines of at most 120 characters, with the answer,
    the claim with its interval, the PPL with its pass probability and the next commands."""
    lines = text.rstrip("\n").splitlines()
    assert 4 <= len(lines) <= MAX_LINES, lines
    # a suggested command is never cut (run as `python -m sweeper` it carries the interpreter's path)
    commands = ("next: ", "then: ")
    assert all(len(line) <= WIDTH for line in lines if not line.startswith(commands)), [len(line) for line in lines]
    assert re.match(
        r"^(done|stopped|interrupted).*: \d+ servers? \(\d+ trials? searched, \d+ race servers?"
        r"(, \d+ verification servers?)?\) in ",
        lines[0],
    )
    answer = [line for line in lines if line.startswith("answer: ")]
    claim = [line for line in lines if line.startswith("claim: ")]
    ppl = [line for line in lines if line.startswith("PPL ")]
    assert len(answer) == 1 and " tok/s" in answer[0], lines
    assert len(claim) == 1 and ("interval" in claim[0] or "the base manifest" in claim[0]), lines
    assert len(ppl) == 1 and "(cap " in ppl[0], lines
    nexts = [line for line in lines if line.startswith(("next: ", "then: "))]
    assert nexts and "sweeper export" in nexts[-1], lines
    return lines


# where each output states the answer's TPS (the first group: the figure)
RUN_PATTERN = r"^answer: [^:]*: (\d+\.\d+) tok/s"
STATUS_PATTERNS = (r"^best: trial \d+: TPS (\d+\.\d+)", r"^claim: .*; trial \d+, (\d+\.\d+) tok/s over")
EXPORT_PATTERN = r"trial #\d+: TPS (\d+\.\d+)"
DESCRIPTION_PATTERN = r"Tuned: TPS (\d+\.\d+)"
TRIAL_PATTERN = r"^configuration of trial \d+: TPS (\d+\.\d+)"
SUMMARY_PATTERN = r"^- TPS (\d+\.\d+) tok/s"
TILE_PATTERN = r'<div class="v">(\d+\.\d+) tok/s</div><div class="k">winner TPS</div>'
BASE_PATTERN = r"^base manifest: trial \d+: TPS (\d+\.\d+)"
CLAIM_PATTERN = r"^claim: ([+-]\d+\.\d) % "


def check_outputs(
    expected: float,
    *,
    run_text: str | None = None,
    status_text: str | None = None,
    status_json: Mapping[str, Any] | None = None,
    export_text: str | None = None,
    description: str | None = None,
    trial_text: str | None = None,
    trials_csv: str | None = None,
    summary: str | None = None,
    page: str | None = None,
) -> None:
    """The outputs given all state ``expected`` (rounded as each prints it) for the answer.

    ``trial_text``: ``status --trial N`` of one of the answer's trials; ``trials_csv``,
    ``summary`` and ``page``: the report's trials.csv, summary.md and report.html."""
    if run_text is not None:
        assert_one_figure(expected, printed(run_text, RUN_PATTERN), "sweeper run")
    if status_text is not None:
        found = [figure for pattern in STATUS_PATTERNS for figure in printed(status_text, pattern)]
        assert_one_figure(expected, found, "sweeper status")
    if status_json is not None:
        incumbent = status_json["standing"]["incumbent"]
        assert math.isclose(incumbent["estimate"], expected, rel_tol=1e-9), incumbent
        assert math.isclose(incumbent["tps"], expected, rel_tol=1e-9), incumbent
        assert math.isclose(incumbent["tps_interval"]["value"], expected, rel_tol=1e-9), incumbent
        best = status_json["best"]
        assert best["number"] == incumbent["trial"] and math.isclose(best["tps"], expected, rel_tol=1e-9), best
        # the answer need not be on the Pareto set (another configuration may read faster once, or
        # have a lower PPL); where it is, its row carries the same figure
        for row in [r for r in status_json["pareto"] if r["number"] == incumbent["trial"]]:
            assert math.isclose(row["tps"], expected, rel_tol=1e-9), row
    if trial_text is not None:
        assert_one_figure(expected, printed(trial_text, TRIAL_PATTERN), "sweeper status --trial")
    if trials_csv is not None:
        rows = list(csv.DictReader(io.StringIO(trials_csv)))
        (winner,) = [r for r in rows if r["winner"] == "1"]
        assert_one_figure(expected, [(float(winner["tps_estimate"]), 4)], "trials.csv")
        # every trial of the answer's configuration carries the one figure beside its own reading
        mine = [r for r in rows if r["tps_estimate"] == winner["tps_estimate"]]
        assert {r["reading"] for r in mine} <= {"counted", "selected it: not counted"}, mine
    if summary is not None:
        assert_one_figure(expected, printed(summary, SUMMARY_PATTERN), "summary.md")
    if page is not None:
        assert_one_figure(expected, printed(page, TILE_PATTERN), "report.html's tile")
    if export_text is not None:
        assert_one_figure(expected, printed(export_text, EXPORT_PATTERN), "sweeper export")
    if description is not None:
        assert_one_figure(expected, printed(description, DESCRIPTION_PATTERN), "the exported description")


def claim_pairs(records: Iterable[Any], answer: Mapping[str, Any], base: Mapping[str, Any]):
    """(answer, base) readings of each round the answer and the base were both measured in after
    the answer was picked, from the stored roles (``confirm[:claim]:<contender>:<round>``)."""
    rounds: dict[str, dict[str, float]] = {}
    for r in records:
        if r.state == "complete" and r.role.startswith("confirm:") and r.tps:
            side = "answer" if dict(r.params) == dict(answer) else "base" if dict(r.params) == dict(base) else None
            if side is not None:
                rounds.setdefault(r.role, {})[side] = float(r.tps)
    return [(pair["answer"], pair["base"]) for pair in rounds.values() if len(pair) == 2]


def check_base_divides_to_the_claim(status_text: str, pairs: Sequence[tuple[float, float]]) -> None:
    """``status``'s base figure and answer figure divide to the claim it prints: the base at the
    geometric mean of its readings of the claim's rounds, the claim the mean log ratio of the pairs."""
    assert pairs, "no pair of answer and base readings after selection"
    geomean = lambda values: math.exp(sum(math.log(v) for v in values) / len(values))  # noqa: E731
    answer, base = geomean([a for a, _ in pairs]), geomean([b for _, b in pairs])
    claim = math.exp(sum(math.log(a / b) for a, b in pairs) / len(pairs))
    assert math.isclose(answer / base, claim, rel_tol=1e-12)
    assert_one_figure(base, printed(status_text, BASE_PATTERN), "status's base figure")
    assert_one_figure((claim - 1) * 100, printed(status_text, CLAIM_PATTERN), "status's claim")
    shown_answer = printed(status_text, STATUS_PATTERNS[0])[0][0]
    shown_base = printed(status_text, BASE_PATTERN)[0][0]
    # what a reader divides: the figures as printed give the claim, to their rounding
    assert abs(shown_answer / shown_base - claim) * 100 < 0.01, (shown_answer, shown_base, claim)
