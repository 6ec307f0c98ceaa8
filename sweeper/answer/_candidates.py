"""The study's answer, and the verdict of a verification.

``judge`` decides whether a candidate's held-out repeats verify it: its
held-out PPL is at most the cap in every repeat, and the median held-out
TPS is within the tolerance of the tuned TPS, either way. ``study_answer``
picks the answer of a study: the fastest verified trial; while none is
verified, the fastest feasible one, flagged as unverified. Pure functions
of stored records: no server, no database.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from storage import FAILED, VERIFIED, TrialRecord, VerificationRecord, VerificationRun, is_answer

UNVERIFIED = "unverified"


# -- the verdict ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    status: str  # verified | failed
    reason: str
    median_tps: float | None
    max_ppl: float | None


def judge(
    *, tuned_tps: float, ppl_cap: float, runs: Sequence[VerificationRun], tolerance: float, repeats: int
) -> Verdict:
    """The verdict on a candidate's repeats (pure: no server, no database)."""
    ppls = [run.ppl for run in runs if run.ppl is not None]
    tpss = [run.tps for run in runs if run.state == "complete" and run.tps is not None]
    max_ppl = max(ppls) if ppls else None
    median_tps = statistics.median(tpss) if tpss else None

    def failed(reason: str) -> Verdict:
        return Verdict(status=FAILED, reason=reason, median_tps=median_tps, max_ppl=max_ppl)

    for run in runs:
        if run.state != "complete":
            return failed(
                f"repeat {run.repeat + 1} could not be measured ({run.error_kind}: {run.error_message})"
            )
        if run.ppl is None:
            return failed(f"repeat {run.repeat + 1} measured no PPL")
        if not run.ppl <= ppl_cap:
            return failed(
                f"held-out PPL {_ppl_text(run.ppl)} is over the cap {ppl_cap:.4f} in repeat {run.repeat + 1}"
            )
        if run.tps is None:
            return failed(f"repeat {run.repeat + 1} measured no TPS")
    if len(runs) < repeats:
        return failed(f"only {len(runs)} of {repeats} repeats ran")
    assert median_tps is not None and max_ppl is not None
    deviation = (median_tps - tuned_tps) / tuned_tps if tuned_tps else math.inf
    if abs(deviation) > tolerance:
        return failed(
            f"median held-out TPS {median_tps:.2f} is {abs(deviation):.1%} "
            f"{'below' if deviation < 0 else 'above'} the tuned {tuned_tps:.2f} "
            f"(tolerance {tolerance:.0%})"
        )
    return Verdict(
        status=VERIFIED,
        reason=(
            f"held-out PPL at most {max_ppl:.4f} (cap {ppl_cap:.4f}) in {len(runs)} repeats; "
            f"median TPS {median_tps:.2f} is within {tolerance:.0%} of the tuned {tuned_tps:.2f} "
            f"({deviation:+.1%})"
        ),
        median_tps=median_tps,
        max_ppl=max_ppl,
    )


def _ppl_text(ppl: float) -> str:
    return "inf" if not math.isfinite(ppl) else f"{ppl:.4f}"


# -- which trials, and the answer -------------------------------------------------------


def _params_key(record: TrialRecord) -> str:
    return json.dumps(dict(record.params), sort_keys=True, default=str)


def ranked_answers(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Feasible measured trials, fastest first, one per distinct configuration."""
    seen: set[str] = set()
    ranked = []
    for record in sorted((r for r in records if is_answer(r)), key=lambda r: (-r.tps, r.ppl, r.number)):
        key = _params_key(record)
        if key not in seen:
            seen.add(key)
            ranked.append(record)
    return ranked


def candidates(records: Iterable[TrialRecord], top: int) -> list[TrialRecord]:
    """The ``top`` best feasible configurations (the Pareto-best first: fastest, then lowest PPL)."""
    return ranked_answers(records)[:top]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """The study's answer: its trial (None: no feasible trial) and verification status.

    ``status``: verified (the fastest verified trial), unverified (no trial
    verified yet: the fastest feasible one not failed), failed (every
    feasible trial that was verified failed, and none is left untried).
    """

    record: TrialRecord | None
    status: str
    verification: VerificationRecord | None = None

    @property
    def verified(self) -> bool:
        return self.status == VERIFIED

    def describe(self) -> str:
        if self.record is None:
            return "no feasible trial"
        r = self.record
        text = f"trial #{r.number}: TPS {r.tps:.2f}, PPL {r.ppl:.4f}"
        if self.verified and self.verification is not None:
            v = self.verification
            return f"{text}, VERIFIED (held-out median TPS {v.median_tps:.2f}, max PPL {v.max_ppl:.4f})"
        if self.status == FAILED and self.verification is not None:
            return f"{text}, FAILED verification ({self.verification.reason})"
        return f"{text}, UNVERIFIED"


def study_answer(
    records: Iterable[TrialRecord], latest: Mapping[int, VerificationRecord]
) -> Answer:
    """The fastest verified trial; else the fastest feasible one not failed; else the fastest."""
    ranked = ranked_answers(records)
    if not ranked:
        return Answer(record=None, status=UNVERIFIED)
    for record in ranked:
        found = latest.get(record.number)
        if found is not None and found.verified:
            return Answer(record=record, status=VERIFIED, verification=found)
    for record in ranked:
        found = latest.get(record.number)
        if found is None or found.status != FAILED:
            return Answer(record=record, status=UNVERIFIED, verification=found)
    return Answer(record=ranked[0], status=FAILED, verification=latest.get(ranked[0].number))


def verify_command(study_name: str, storage_url: str | None = None) -> str:
    """The command line that verifies a study (``--storage`` only when not the default)."""
    from storage import DEFAULT_URL, normalize_url, redact

    command = f"sweeper verify --study {study_name}"
    if storage_url and normalize_url(storage_url) != normalize_url(DEFAULT_URL):
        command += f" --storage {redact(normalize_url(storage_url))}"
    return command
