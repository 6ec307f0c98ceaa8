"""The study's answer, and the verdict of a verification.

``judge_candidate`` decides whether a candidate's held-out repeats verify it: its
held-out PPL is at most the cap in every repeat, the median held-out TPS is
within the tolerance of the tuned TPS, either way, and, when the study
claims the candidate is faster than its base configuration, the held-out
speedup over the base (measured beside it, the control) is confirmed: the
low end of its interval is above 1. ``study_answer`` picks the answer of a
study: its confirmed best (the standing's incumbent,
``sweeper.study.standing``) once verified or while unverified; the next
best when it failed verification. Pure functions of stored records: no
server, no database.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from evaluators.intervals import (
    DEFAULT_CONFIDENCE,
    Interval,
    Spread,
    pooled_spread,
    speedup_interval,
)
from storage import (
    DEFAULT_URL,
    Control,
    TrialRecord,
    VerificationRecord,
    VerificationRun,
    VerificationStatus,
    normalize_url,
    redact,
)
from sweeper import invocation
from sweeper._text import percent_text
from sweeper.study import DEFAULT_NOISE, Configuration, ConfirmSettings, Standing, standing
from sweeper.words import Word

# the weight the assumed between-server spread (``DEFAULT_NOISE`` where no study gives one) has in
# the pool (degrees of freedom), as a study's (``ConfirmSettings``); the confidence of the speedup interval
NOISE_PRIOR_DF = 2.0
SPEEDUP_CONFIDENCE = DEFAULT_CONFIDENCE


# -- the verdict ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class CandidateVerdict:
    """The verdict on one candidate's held-out repeats (``status``: verified or failed).

    ``control``: measured (base repeats ran beside the candidate's), is-base (the
    candidate is the base configuration) or off; ``speedup``: the held-out speedup
    interval over the base (None without base figures), made with ``spread``."""

    status: VerificationStatus  # VERIFIED or FAILED
    reason: str
    median_tps: float | None
    max_ppl: float | None
    control: Control = Control.OFF
    claimed_speedup: bool = False
    speedup: Interval | None = None
    spread: Spread | None = None


def judge_candidate(
    *,
    tuned_tps: float,
    ppl_cap: float,
    runs: Sequence[VerificationRun],
    tolerance: float,
    repeats: int,
    base_runs: Sequence[VerificationRun] | None = None,
    is_base: bool = False,
    claimed_speedup: bool | None = None,
    noise: float = DEFAULT_NOISE,
    noise_df: float = NOISE_PRIOR_DF,
    confidence: float = SPEEDUP_CONFIDENCE,
) -> CandidateVerdict:
    """The verdict on a candidate's repeats (pure: no server, no database).

    ``tuned_tps``: the figure the held-out median must match (one trial's TPS,
    or a better estimate the caller has). ``base_runs``: the control's
    repeats, None when none ran (``is_base``: the candidate is the base
    configuration itself; else the control was switched off).
    ``claimed_speedup``: whether the study claims the candidate is faster
    than the base (None: it does unless the candidate is the base); without
    a claim the speedup is shown but not required. The speedup interval pools
    the between-server spread of both sides' TPS with the prior ``noise``
    (weighted as ``noise_df`` degrees of freedom): verify passes the study's.
    """
    ppls = [run.ppl for run in runs if run.ppl is not None]
    tpss = [run.tps for run in runs if run.state == "complete" and run.tps is not None]
    control = Control.IS_BASE if is_base else Control.OFF if base_runs is None else Control.MEASURED
    spread, speedup = _speedup_over_base(control, runs, base_runs, noise, noise_df, confidence)
    found = functools.partial(
        CandidateVerdict,
        median_tps=statistics.median(tpss) if tpss else None,
        max_ppl=max(ppls) if ppls else None,
        control=control,
        claimed_speedup=False if is_base else (True if claimed_speedup is None else bool(claimed_speedup)),
        speedup=speedup,
        spread=spread,
    )
    failure = _repeat_failure(runs, ppl_cap, repeats)
    if failure is not None:
        return found(status=VerificationStatus.FAILED, reason=failure)
    verdict = found(status=VerificationStatus.VERIFIED, reason="")
    assert verdict.median_tps is not None and verdict.max_ppl is not None
    deviation = (verdict.median_tps - tuned_tps) / tuned_tps if tuned_tps else math.inf
    if abs(deviation) > tolerance:
        return found(
            status=VerificationStatus.FAILED,
            reason=f"median held-out TPS {verdict.median_tps:.2f} is {abs(deviation):.1%} "
            f"{'below' if deviation < 0 else 'above'} the tuned {tuned_tps:.2f} "
            f"(tolerance {tolerance:.0%})",
        )
    reproduced = (
        f"held-out PPL at most {verdict.max_ppl:.4f} (cap {ppl_cap:.4f}) in {len(runs)} repeats; "
        f"median TPS {verdict.median_tps:.2f} is within {tolerance:.0%} of the tuned {tuned_tps:.2f} "
        f"({deviation:+.1%})"
    )
    status, reason = _speedup_check(verdict, base_runs, reproduced)
    return found(status=status, reason=reason)


def _speedup_over_base(
    control: Control,
    runs: Sequence[VerificationRun],
    base_runs: Sequence[VerificationRun] | None,
    noise: float,
    noise_df: float,
    confidence: float,
) -> tuple[Spread | None, Interval | None]:
    """The held-out speedup over the base, with the spread it was made with (None, None:
    no control measured, or a side with no TPS figure)."""
    candidate_tpss, base_tpss = _tps_figures(runs), _tps_figures(base_runs or ())
    if control is not Control.MEASURED or not candidate_tpss or not base_tpss:
        return None, None
    spread = pooled_spread([candidate_tpss, base_tpss], prior=noise, prior_df=noise_df)
    return spread, speedup_interval(candidate_tpss, base_tpss, spread=spread, confidence=confidence)


def _repeat_failure(runs: Sequence[VerificationRun], ppl_cap: float, repeats: int) -> str | None:
    """Why the candidate's repeats fail it on their own (None: every repeat measured, under the cap)."""
    for run in runs:
        if run.state != "complete":
            return f"repeat {run.repeat + 1} could not be measured ({run.error_kind}: {run.error_message})"
        if run.ppl is None:
            return f"repeat {run.repeat + 1} measured no PPL"
        if not run.ppl <= ppl_cap:
            return f"held-out PPL {_ppl_text(run.ppl)} is over the cap {ppl_cap:.4f} in repeat {run.repeat + 1}"
        if run.tps is None:
            return f"repeat {run.repeat + 1} measured no TPS"
    if len(runs) < repeats:
        return f"only {len(runs)} of {repeats} repeats ran"
    return None


def _speedup_check(
    verdict: CandidateVerdict, base_runs: Sequence[VerificationRun] | None, reproduced: str
) -> tuple[VerificationStatus, str]:
    """(status, reason) once the tuned figure ``reproduced``: a claimed speedup over the base
    must be confirmed (the low end of its interval above 1); one not claimed is shown."""
    speedup = verdict.speedup
    if verdict.control is Control.IS_BASE:
        return VerificationStatus.VERIFIED, (
            f"{reproduced}; the candidate is the base configuration: no control ran and there is "
            "no speedup over the base to confirm"
        )
    if verdict.control is Control.OFF:
        return (
            VerificationStatus.VERIFIED,
            f"{reproduced}; no control ran (switched off): the speedup over the base is not checked",
        )
    if not verdict.claimed_speedup:
        shown = speedup_text(speedup) if speedup else "the control measured no TPS"
        return (
            VerificationStatus.VERIFIED,
            f"{reproduced}; the study claims no speedup over the base, so none is required ({shown})",
        )
    if speedup is None:
        failures = [run for run in base_runs or () if run.state != "complete"]
        why = f" ({failures[0].error_kind}: {failures[0].error_message})" if failures else ""
        return VerificationStatus.FAILED, (
            f"the control (the base configuration) measured no TPS in {len(base_runs or ())} "
            f"repeats{why}: the claimed speedup over the base is not confirmed"
        )
    if not speedup.low > 1.0:
        return VerificationStatus.FAILED, (
            f"{speedup_text(speedup)}: its low end is not above +0.0 %, so the claimed speedup "
            "over the base is not confirmed on held-out data"
        )
    return VerificationStatus.VERIFIED, f"{reproduced}; {speedup_text(speedup)}"


def speedup_text(interval: Interval) -> str:
    """ "held-out speedup over the base: +12.3 % (95 % interval +4.0 % to +21.3 %)"."""
    return (
        f"held-out speedup over the base: {percent_text(interval.value)} "
        f"({interval.confidence * 100:g} % interval {percent_text(interval.low)} to {percent_text(interval.high)})"
    )


def heldout_speedup(verification: VerificationRecord) -> Interval | None:
    """The stored held-out speedup interval of a verification over the base (None: no control
    figures, or a verification from before the control)."""
    v = verification
    if v.speedup is None or v.speedup_low is None or v.speedup_high is None:
        return None
    return Interval(
        value=v.speedup,
        low=v.speedup_low,
        high=v.speedup_high,
        confidence=v.speedup_confidence or SPEEDUP_CONFIDENCE,
        method=(
            f"held-out speedup over the base, {len(_tps_figures(v.runs))} against "
            f"{len(_tps_figures(v.base_runs))} fresh servers, between-server spread "
            + ("unknown" if v.spread is None else f"{v.spread:.1%}")
            + ("" if v.noise is None else f" (noise prior {v.noise:.1%})")
        ),
        samples=len(_tps_figures(v.runs)) + len(_tps_figures(v.base_runs)),
    )


def _tps_figures(runs: Iterable[VerificationRun]) -> list[float]:
    """The TPS figures a speedup can be made of (measured, positive)."""
    return [run.tps for run in runs if run.state == "complete" and run.tps is not None and run.tps > 0]


def _ppl_text(ppl: float) -> str:
    return "inf" if not math.isfinite(ppl) else f"{ppl:.4f}"


# -- which trials, and the answer -------------------------------------------------------


class AnswerStatus(Word):
    """Where the study's answer stands in verification; printed as its word."""

    VERIFIED = "verified"  # the best verified trial
    UNVERIFIED = "unverified"  # no trial verified yet: the best not failed
    FAILED = "failed"  # every feasible trial verified failed, none left untried


_UNRACED = ConfirmSettings()  # a study without races: the figures as measured rank


def ranked_answers(records: Iterable[TrialRecord], settings: ConfirmSettings = _UNRACED) -> list[TrialRecord]:
    """Feasible configurations, one trial each (the one that found it): the study's
    confirmed best first, then the others by their geometric-mean TPS.

    ``settings``: the study's (``ConfirmSettings.from_settings`` of what it
    stored); the default ranks as a study without races.
    """
    records = list(records)
    return _ranked(records, standing(records, settings))


def _ranked(records: Sequence[TrialRecord], now: Standing) -> list[TrialRecord]:
    by_number = {record.number: record for record in records}
    return [by_number[config.first] for config in now.ranked()]


def candidates(records: Iterable[TrialRecord], top: int, settings: ConfirmSettings = _UNRACED) -> list[TrialRecord]:
    """The ``top`` best feasible configurations, the study's answer first."""
    return ranked_answers(records, settings)[:top]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """The study's answer: its trial (None: no feasible trial) and verification status.

    ``status``: verified (the best verified trial), unverified (no trial
    verified yet: the best not failed), failed (every feasible trial that was
    verified failed, and none is left untried). ``standing``: the study's
    claim against the base manifest (the speedup and its interval).
    """

    record: TrialRecord | None
    status: AnswerStatus
    verification: VerificationRecord | None = None
    standing: Standing | None = None

    @property
    def verified(self) -> bool:
        return self.status is AnswerStatus.VERIFIED

    @property
    def configuration(self) -> Configuration | None:
        """The answer's configuration with all its TPS figures (None: no answer)."""
        if self.record is None or self.standing is None:
            return None
        return self.standing.configuration_of(self.record.number)

    @property
    def is_the_claim(self) -> bool:
        """Is the answer the configuration the study's standing claims (its incumbent)?"""
        incumbent = self.standing.incumbent if self.standing is not None else None
        return self.record is not None and incumbent is not None and incumbent.first == self.record.number

    def claim_text(self) -> str | None:
        """The speedup over the base, with its interval and the PPL (None: no standing)."""
        if self.standing is None or self.record is None:
            return None
        if self.is_the_claim:
            return self.standing.describe()
        incumbent = self.standing.incumbent
        return (
            f"not the study's confirmed best (trial {incumbent.first}, which "
            f"{'failed verification' if self.status is not AnswerStatus.FAILED else 'is not verified'}): "
            f"no speedup over the base manifest is claimed for it"
            if incumbent is not None
            else None
        )

    def tps_estimate(self, servers: str = "servers") -> str | None:
        """'X (geometric mean of N servers[ after selection])': the answer's TPS as the claim
        counts it (None: a single figure, or no standing)."""
        config = self.configuration
        if config is None or len(config.tps) < 2 or self.standing is None:
            return None
        counted = self.standing.counted(config)
        after = " after selection" if len(counted) < len(config.tps) else ""
        return f"{self.standing.tps_interval(config).value:.2f} (geometric mean of {len(counted)} {servers}{after})"

    def describe(self) -> str:
        if self.record is None:
            return "no feasible trial"
        r = self.record
        estimate = self.tps_estimate()
        if estimate is not None:
            text = f"trial #{r.number}: TPS {estimate}, PPL {r.ppl:.4f}"
        else:
            text = f"trial #{r.number}: TPS {r.tps:.2f}, PPL {r.ppl:.4f}"
        if self.verified and self.verification is not None:
            v = self.verification
            text = f"{text}, VERIFIED (held-out median TPS {v.median_tps:.2f}, max PPL {v.max_ppl:.4f})"
        elif self.status is AnswerStatus.FAILED and self.verification is not None:
            text = f"{text}, FAILED verification ({self.verification.reason})"
        else:
            text = f"{text}, UNVERIFIED"
        claim = self.claim_text()
        return f"{text}; {claim}" if claim else text


def study_answer(
    records: Iterable[TrialRecord],
    latest: Mapping[int, VerificationRecord],
    settings: ConfirmSettings = _UNRACED,
) -> Answer:
    """The best verified configuration; else the best not failed; else the best.

    "Best" is the study's standing (``sweeper.study.standing``): its
    confirmed incumbent first, then by geometric-mean TPS.
    """
    records = list(records)
    now = standing(records, settings)
    ranked = _ranked(records, now)
    if not ranked:
        return Answer(record=None, status=AnswerStatus.UNVERIFIED, standing=now)
    for record in ranked:
        found = latest.get(record.number)
        if found is not None and found.verified:
            return Answer(record=record, status=AnswerStatus.VERIFIED, verification=found, standing=now)
    for record in ranked:
        found = latest.get(record.number)
        if found is None or found.status is not VerificationStatus.FAILED:
            return Answer(record=record, status=AnswerStatus.UNVERIFIED, verification=found, standing=now)
    return Answer(record=ranked[0], status=AnswerStatus.FAILED, verification=latest.get(ranked[0].number), standing=now)


def verify_command(study_name: str, storage_url: str | None = None) -> str:
    """The command line that verifies a study (``--storage`` only when not the default)."""
    command = invocation.command(f"verify --study {study_name}")
    if storage_url and normalize_url(storage_url) != normalize_url(DEFAULT_URL):
        command += f" --storage {redact(normalize_url(storage_url))}"
    return command
