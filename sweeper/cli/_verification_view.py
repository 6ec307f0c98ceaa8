"""How verifications read: the table, each failure's reason, the held-out speedup over the base and
the held-out PPL (``sweeper verify`` and ``sweeper status`` show them the same)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.table import Table

from storage import Control, VerificationRecord, VerificationStatus
from sweeper.answer import heldout_speedup, heldout_statement, heldout_text, speedup_text


def verification_table(verifications: Iterable[VerificationRecord], *, title: str) -> Table:
    """One row per verification (also used by 'sweeper status'); one line per row in 80 columns:
    a cap shared by every row is named in the caption instead of a column of its own."""
    verifications = list(verifications)
    caps = {v.ppl_cap for v in verifications}
    shared_cap = next(iter(caps)) if len(caps) == 1 else None
    table = Table(title=title)
    columns = ["trial", "status", "tuned", "held-out", "dev", "vs base", "PPL"]
    columns += ["runs"] if shared_cap is not None else ["cap", "runs"]
    for column in columns:
        table.add_column(column, justify="left" if column == "status" else "right", no_wrap=True)
    for v in verifications:
        style = "green" if v.verified else "red" if v.status is VerificationStatus.FAILED else "yellow"
        cells = [
            f"#{v.trial_number}",
            f"[{style}]{v.status.upper()}[/{style}]",
            f"{v.tuned_tps:.2f}",
            "-" if v.median_tps is None else f"{v.median_tps:.2f}",
            "-" if v.tps_deviation is None else f"{v.tps_deviation:+.1%}",
            _versus_base(v),
            "-" if v.max_ppl is None else f"{v.max_ppl:.4f}",
        ]
        cells += [] if shared_cap is not None else [f"{v.ppl_cap:.4f}"]
        table.add_row(*cells, f"{len(v.runs)}/{v.repeats}")
    table.caption = (
        "TPS tuned vs held-out (median of the runs), dev = their gap; vs base: the held-out "
        "speedup over the base configuration; PPL: the highest held-out"
        + (f" (cap {shared_cap:.4f})" if shared_cap is not None else "")
    )
    return table


def _versus_base(v: VerificationRecord) -> str:
    if v.control is Control.IS_BASE:
        return "is base"
    if v.control is Control.OFF:
        return "off"
    interval = heldout_speedup(v)
    return "-" if interval is None else f"{(interval.value - 1) * 100:+.1f}%"


def control_lines(verifications: Iterable[VerificationRecord]) -> list[str]:
    """The held-out speedup over the base of each verification that measured the control
    (left out where a failure line already says it)."""
    lines = []
    for v in verifications:
        interval = heldout_speedup(v)
        if interval is None:
            continue
        text = speedup_text(interval)
        if not v.verified and text in v.reason:
            continue
        claim = "" if v.claimed_speedup else " (no speedup claimed)"
        lines.append(f"trial #{v.trial_number}: {text}{claim}")
    return lines


def heldout_ppl_lines(verifications: Iterable[VerificationRecord], settings: Mapping[str, Any]) -> list[str]:
    """Each verification's held-out PPL with its interval and the re-run's chance (also used by
    'sweeper status'); one within the noise of the cap is flagged even when it passed. A
    verification without per-record figures (an evaluator of one's own) has no line."""
    lines = []
    for v in verifications:
        statement = heldout_statement(v, settings)
        if statement is not None and statement.known:
            lines.append(f"trial #{v.trial_number}: {heldout_text(statement)}")
    return lines


def failure_lines(verifications: Iterable[VerificationRecord]) -> list[str]:
    """Why each failed verification failed (the table leaves the reasons out)."""
    return [f"trial #{v.trial_number} {v.status}: {v.reason}" for v in verifications if not v.verified]
