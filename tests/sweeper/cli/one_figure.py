"""Checks that every output states one TPS figure for the study's answer.

Shared by tests/sweeper/cli (stored studies, no servers) and the real-vLLM end-to-end
run in tests/sweeper/sweep (loaded by path: the tests are not a package). The figure
is recomputed here from the stored trials, independently of ``sweeper.study``: the
geometric mean of the answer's TPS figures measured after selection (its confirmation
trials, and the baseline's own trial when the answer is the base), else of all of them.
"""

from __future__ import annotations

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
    assert all(len(line) <= WIDTH for line in lines), [len(line) for line in lines]
    assert re.match(
        r"^(done|stopped|interrupted).*: \d+ servers? \(\d+ trials? searched, \d+ race servers?\) in ", lines[0]
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


def check_outputs(
    expected: float,
    *,
    run_text: str | None = None,
    status_text: str | None = None,
    status_json: Mapping[str, Any] | None = None,
    export_text: str | None = None,
    description: str | None = None,
) -> None:
    """The outputs given all state ``expected`` (rounded as each prints it) for the answer."""
    if run_text is not None:
        assert_one_figure(expected, printed(run_text, RUN_PATTERN), "sweeper run")
    if status_text is not None:
        found = [figure for pattern in STATUS_PATTERNS for figure in printed(status_text, pattern)]
        assert_one_figure(expected, found, "sweeper status")
    if status_json is not None:
        incumbent = status_json["standing"]["incumbent"]
        assert math.isclose(incumbent["estimate"], expected, rel_tol=1e-9), incumbent
        assert math.isclose(incumbent["tps_interval"]["value"], expected, rel_tol=1e-9), incumbent
    if export_text is not None:
        assert_one_figure(expected, printed(export_text, EXPORT_PATTERN), "sweeper export")
    if description is not None:
        assert_one_figure(expected, printed(description, DESCRIPTION_PATTERN), "the exported description")
