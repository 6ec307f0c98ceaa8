"""The block ``sweeper run`` ends with: what was found, read at a glance.

At most ``MAX_LINES`` lines of at most ``WIDTH`` characters: how many servers ran
(the trials searched and the race servers), the answer with its settings and its
TPS after selection, the claim over the base in plain words with its interval, the
PPL with the chance that a re-run passes the cap, and the commands to run next.
The derivation behind the claim (rounds, pairs, degrees of freedom, the study-wise
share, the Pareto set) is in ``sweeper status``, ``sweeper run --verbose`` and
``--json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from storage import DEFAULT_URL, TrialRecord, VerificationRecord, normalize_url, redact
from sweeper._text import level_text, percent_text
from sweeper.answer import ServerCount, answer_tps, tps_figure_text
from sweeper.cli._formats import params_text
from sweeper.invocation import command
from sweeper.measure import duration_text
from sweeper.study import Claim, PplStatement, Standing, ppl_statement, probability_text

WIDTH = 120
MAX_LINES = 6
EXPORT_TO = "answer/manifest.json"

# how each stop reason of a study reads at the head of the block
_STOPPED = {
    "n_trials": "done",
    "timeout": "stopped at the timeout",
    "interrupted": "interrupted",
    "terminated": "terminated",
}


def command_options(storage: str, study_name: str, *, name_study: bool) -> str:
    """`` --storage URL --study NAME`` as the next commands need them (empty: the defaults do)."""
    parts = []
    if normalize_url(storage) != normalize_url(DEFAULT_URL):
        parts.append(f" --storage {redact(storage) if '://' in storage else storage}")
    if name_study:
        parts.append(f" --study {study_name}")
    return "".join(parts)


def claim_line(now: Standing) -> str:
    """The claim over the base manifest in plain words, with its interval (``now.claim`` says which)."""
    assert now.incumbent is not None, "a standing with an answer"
    open_race = "" if now.confirmed else "; a race is still open"
    claim = now.claim
    if claim is Claim.NONE:  # with an answer, only when the base was not measured
        return f"claim: none - the base manifest was not measured, so no speedup can be stated{open_race}"
    if claim is Claim.BASE:
        return f"claim: none - no configuration was confirmed faster than the base manifest{open_race}"
    interval = now.speedup
    assert interval is not None, "a claim over the base rests on a speedup"
    if now.basis is not None:
        level = f"study-wise {level_text(now.basis.study_confidence)} interval"
    else:
        level = f"{level_text(interval.confidence)} interval"
    span = f"{level} {percent_text(interval.low)} to {percent_text(interval.high)}"
    if claim is Claim.FASTER:
        return f"claim: {percent_text(interval.value)} faster than the base ({span}){open_race}"
    if claim is Claim.SLOWER:
        return f"claim: {percent_text(interval.value)}, slower than the base ({span}){open_race}"
    return f"claim: none - {percent_text(interval.value)} is not distinguishable from the base ({span}){open_race}"


def ppl_line(statement: PplStatement | None, ppl: float, cap: float) -> str:
    """``PPL 2.1502 (cap 2.2577), passes a re-run on 8 new records with probability 0.97``."""
    text = f"PPL {ppl:.4f} (cap {cap:.4f})"
    if statement is None or statement.pass_probability is None or statement.rerun_records is None:
        return text
    return (
        f"{text}, passes a re-run on {statement.rerun_records} new records with probability "
        f"{probability_text(statement.pass_probability)}"
    )


def _fit(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def closing_block(
    *,
    records: Sequence[TrialRecord],
    now: Standing,
    settings: Mapping[str, Any],
    stop_reason: str,
    seconds: float,
    trials_run: int,
    options: str,
    verified: bool,
    verifications: Iterable[VerificationRecord] = (),
) -> list[str]:
    """The block (``now`` must have an incumbent): at most MAX_LINES lines of at most WIDTH characters.

    ``options``: what the next commands need (``command_options``); ``verified``:
    the answer is verified already, so the next command is the export alone; ``verifications``:
    the study's (their servers are counted with the others). A line
    longer than WIDTH is cut, except the next commands (a storage URL longer than
    the line leaves them longer).
    """
    inc = now.incumbent
    assert inc is not None
    count = ServerCount.of(records, verifications)
    word = ", ".join(_STOPPED.get(reason, reason) for reason in stop_reason.split(",") if reason) or "stopped"
    head = f"{word}: {count.text()} in {duration_text(seconds)}"
    if trials_run != count.servers:  # a resumed study: say what this run added
        head += f", {trials_run} this run"
    figure = answer_tps(now)
    assert figure is not None
    who = f"the base manifest (trial {inc.first})" if inc.is_base else f"trial {inc.first}"
    answer = f"answer: {who}: {tps_figure_text(figure)}"
    params = params_text(inc.params)
    answer_lines = [f"{answer} with {params}"] if params else [answer]
    record = next((r for r in records if r.number == inc.first), None)
    statement = None if record is None else ppl_statement(record.ppl, record.extras, record.ppl_cap, settings)
    export = command(f"export{options} -o {EXPORT_TO}")
    if verified:
        next_lines = [f"next: {export}"]
    else:
        together = f"next: {command('verify' + options)}, then {export}"
        next_lines = (
            [together] if len(together) <= WIDTH else [f"next: {command('verify' + options)}", f"then: {export}"]
        )
    if len(answer_lines[0]) > WIDTH and len(next_lines) == 1:  # room for the settings on a line of their own
        answer_lines = [answer, f"  with {params}"]
    lines = [head, *answer_lines, claim_line(now), ppl_line(statement, inc.ppl, inc.ppl_cap)]
    # a command is never cut: it is copied as is (only a long --storage makes it pass WIDTH)
    return [_fit(line) for line in lines] + next_lines
