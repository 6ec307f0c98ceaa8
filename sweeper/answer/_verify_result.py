"""What a verify reports: ``VerifyEvent`` (to the progress callback), ``VerifyResult``, and the
held-out PPL told with its interval (``heldout_statement``, ``heldout_text``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from storage import (
    CANDIDATE,
    VerificationRecord,
    VerificationRun,
)
from sweeper.answer._candidates import (
    Answer,
)
from sweeper.answer._figure import answer_figure
from sweeper.study import (
    PplStatement,
    ppl_statement,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyEvent:
    """Told to the progress callback: a candidate or one of its repeats starts or ends."""

    kind: str  # candidate | repeat-started | repeat-finished | verdict | skipped
    trial_number: int
    repeat: int | None = None
    subject: str = CANDIDATE  # whose repeat: the candidate's, or the base's (the control)
    run: VerificationRun | None = None
    verification: VerificationRecord | None = None
    message: str = ""


def heldout_statement(verification: VerificationRecord, settings: Mapping[str, Any]) -> PplStatement | None:
    """The held-out PPL with its interval and the chance that a re-run passes the cap.

    The highest held-out PPL of the candidate's repeats (the one the verdict
    judges) with the standard error of its records; the re-run is on the
    study's ``ppl_rerun_records`` new records (else as many as were scored),
    under a relative cap with the baseline's record noise, as the gate
    judges. ``within_noise``: the cap lies inside the held-out 95 %
    interval, so a pass is no promise. None: no PPL measured.
    """
    scored = [(r, r.ppl) for r in verification.runs if r.state == "complete" and r.ppl is not None]
    if not scored:
        return None
    run, ppl = max(scored, key=lambda scored_run: scored_run[1])  # the first of the highest
    return ppl_statement(ppl, run.extras, verification.ppl_cap, settings)


def heldout_text(statement: PplStatement) -> str:
    """``held-out PPL 2.1600 (95 % interval ...); on 16 new records ...[; WITHIN NOISE ...]``."""
    text = f"held-out {statement.text()}"
    if statement.within_noise and statement.cap is not None:
        over = statement.cap < statement.ppl
        text += f"; WITHIN NOISE of the cap: {statement.cap:.4f} is inside the held-out interval, so " + (
            "new records may well pass it" if over else "new records may put it over the cap"
        )
    return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyResult:
    study_name: str
    verifications: tuple[VerificationRecord, ...]  # made by this call
    skipped: tuple[tuple[int, str], ...]  # (trial number, why) not verified again
    answer: Answer
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the study's
    # the standing verification of each candidate skipped (already verified or failed)
    previous: tuple[VerificationRecord, ...] = ()

    def heldout_ppl(self, verification: VerificationRecord) -> PplStatement | None:
        return heldout_statement(verification, self.settings)

    def to_dict(self) -> dict[str, Any]:
        answer = self.answer

        def with_ppl(v: VerificationRecord) -> dict[str, Any]:
            statement = self.heldout_ppl(v)
            return {**v.to_dict(), "heldout_ppl": statement.to_dict() if statement else None}

        return {
            "study": self.study_name,
            "verifications": [with_ppl(v) for v in self.verifications],
            "skipped": [{"trial": n, "reason": why} for n, why in self.skipped],
            "previous": [with_ppl(v) for v in self.previous],
            "answer": {
                "trial": answer.record.number if answer.record else None,
                "status": answer.status,
                "tps": answer_figure(answer),
                "ppl": answer.record.ppl if answer.record else None,
            },
        }
