"""The quality gate: PPL must not exceed a cap, absolute or relative to a measured baseline.

The gate is an Optuna constraint (``trial.set_constraint("ppl_gate", ppl - cap)``),
so samplers learn where it fails and a gate-failing trial is never the best
one. A relative cap (``--ppl-cap-rel 1.05``: the challenge's "reference + 5 %")
is resolved from the baseline trial, which the study runs first.

With a ``confidence`` the gate is judged on the records' uncertainty, not
on the point estimate: a configuration passes only when the upper bound of
its PPL at that level, on a re-run over ``rerun_records`` fresh records
(default: as many as it was measured on), is at most the cap
(``evaluators.ppl_uncertainty``). So a configuration the gate passes
passes the organizers' re-run on their private records with at least that
probability. Under a relative cap the bound is on ``PPL / baseline PPL``,
as the organizers' re-run scores both on the same private records: its
standard error comes from the per-record differences of the two on the
records both scored (``paired_stderr``), so what the records share cancels;
where the two have no common per-record rows, the two standard deviations
are added in quadrature (exact for independent record sets, cautious
otherwise). The constraint Optuna sees is then
``bound - cap``. Without a standard error (an evaluator that stores no
per-record scores) the point estimate stands in, with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna

from evaluators.ppl import RecordScore
from evaluators.ppl_uncertainty import PplEstimate, paired_log_ppl, record_stderr, rerun_spread
from storage import STUDY_ATTR_PREFIX
from sweeper import invocation
from sweeper.errors import StudyError, UserInputError

logger = logging.getLogger(__name__)

CONSTRAINT = "ppl_gate"
REFERENCE_ATTR = f"{STUDY_ATTR_PREFIX}reference_ppl"
REFERENCE_TRIAL_ATTR = f"{STUDY_ATTR_PREFIX}reference_trial"
REFERENCE_STDERR_ATTR = f"{STUDY_ATTR_PREFIX}reference_stderr_log_ppl"
REFERENCE_RECORDS_ATTR = f"{STUDY_ATTR_PREFIX}reference_ppl_records"
# the confidence ``sweeper run`` gates at (docs/measurement.md, "PPL on records not seen")
PPL_GATE_CONFIDENCE = 0.9
# what a judged trial stores in its extras
STDERR_KEY = "ppl_stderr_records"
RECORDS_KEY = "ppl_records"
BOUND_KEY = "ppl_bound"
PASS_PROBABILITY_KEY = "ppl_pass_probability"
RERUN_RECORDS_KEY = "ppl_rerun_records"
# under a relative cap: log(PPL / baseline PPL)'s standard error from the per-record differences
PAIRED_KEY = "ppl_paired_stderr"
PAIRED_RECORDS_KEY = "ppl_paired_records"  # the records both scored, that standard error rests on


def study_settings(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """sweeper's settings among a study's user attributes, without their prefix."""
    return {key[len(STUDY_ATTR_PREFIX) :]: value for key, value in attrs.items() if key.startswith(STUDY_ATTR_PREFIX)}


class GateError(UserInputError):
    """The gate settings are not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplGate:
    """``cap``: PPL <= cap. ``cap_rel``: PPL <= cap_rel x the baseline trial's PPL.

    ``confidence`` (None: the point estimate): pass only when the PPL's upper
    bound at this level, on ``rerun_records`` fresh records (None: as many
    as measured), is at most the cap (the module docstring).
    """

    cap: float | None = None
    cap_rel: float | None = None
    confidence: float | None = None
    rerun_records: int | None = None

    def __post_init__(self) -> None:
        if (self.cap is None) == (self.cap_rel is None):
            raise GateError("give exactly one of ppl_cap (absolute) and ppl_cap_rel (x baseline)")
        for name in ("cap", "cap_rel"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value)):
                raise GateError(f"ppl_{name} must be a positive number, not {value!r}")
        if self.cap_rel is not None and self.cap_rel < 1.0:
            raise GateError(f"ppl_cap_rel must be at least 1.0 (the baseline itself must pass), not {self.cap_rel}")
        if self.confidence is not None and (
            isinstance(self.confidence, bool)
            or not isinstance(self.confidence, (int, float))
            or not 0.5 <= self.confidence < 1.0
        ):
            raise GateError(f"ppl_confidence must be in [0.5, 1), not {self.confidence!r}")
        if self.rerun_records is not None and (
            isinstance(self.rerun_records, bool) or not isinstance(self.rerun_records, int) or self.rerun_records < 1
        ):
            raise GateError(f"ppl_rerun_records must be a positive integer, not {self.rerun_records!r}")

    @property
    def relative(self) -> bool:
        return self.cap_rel is not None

    def describe(self) -> str:
        text = f"PPL <= {self.cap_rel:g} x baseline PPL" if self.relative else f"PPL <= {self.cap:g}"
        if self.confidence is None:
            return text
        rerun = f"{self.rerun_records} new records" if self.rerun_records else "as many new records"
        return f"{text} at {100 * self.confidence:g} % confidence on {rerun}"

    def to_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"ppl_cap": self.cap, "ppl_cap_rel": self.cap_rel}
        if self.confidence is not None:  # a point gate's settings stay as they were
            settings["ppl_confidence"] = self.confidence
            settings["ppl_rerun_records"] = self.rerun_records
        return settings

    @classmethod
    def from_study_attrs(cls, attrs: Mapping[str, Any]) -> PplGate | None:
        """The gate a study stored in its user attributes (None: none stored yet)."""
        settings = study_settings(attrs)
        if settings.get("ppl_cap") is None and settings.get("ppl_cap_rel") is None:
            return None
        return cls.from_settings(settings)

    @classmethod
    def from_settings(cls, stored: dict[str, Any]) -> PplGate:
        """The gate ``to_settings`` wrote (a study's stored settings)."""
        return cls(
            cap=stored.get("ppl_cap"),
            cap_rel=stored.get("ppl_cap_rel"),
            confidence=stored.get("ppl_confidence"),
            rerun_records=stored.get("ppl_rerun_records"),
        )

    def judge_ppl(
        self,
        ppl: float,
        cap: float,
        *,
        stderr_log_ppl: float | None = None,
        records: int | None = None,
        reference: PplEstimate | None = None,
        paired: tuple[float, int] | None = None,
    ) -> GateVerdict:
        """Whether ``ppl`` passes ``cap``, the PPL compared with it, and the re-run's pass chance.

        ``stderr_log_ppl`` and ``records``: the trial's (``measured_uncertainty``);
        ``reference``: the baseline's, under a relative cap; ``paired``: the
        standard error of log(PPL / baseline PPL) and its records from the
        per-record differences (``paired_stderr``), used over ``reference``.
        """
        measured = _measured_uncertainty(stderr_log_ppl, records)
        if measured is None or not math.isfinite(ppl) or ppl <= 0:
            if self.confidence is not None and math.isfinite(ppl) and measured is None:
                logger.warning(
                    "PPL %.4f has no standard error (no per-record scores): the %.0f %% gate judges the point estimate",
                    ppl,
                    100 * self.confidence,
                )
            return GateVerdict(
                passes=math.isfinite(ppl) and ppl <= cap,
                bound=ppl,
                pass_probability=(0.0 if not math.isfinite(ppl) else None),
                stderr_log_ppl=measured[0] if measured is not None else None,
                records=records,
                rerun_records=None,
            )
        stderr_log_ppl, records = measured
        rerun = self.rerun_records or records
        estimate = PplEstimate(ppl=ppl, stderr_log_ppl=stderr_log_ppl, records=records)
        paired_used = paired if self.relative else None
        spread = rerun_spread(estimate, rerun, paired=paired_used, reference=reference if self.relative else None)
        probability = spread.probability_within(math.log(cap) - math.log(ppl))
        if self.confidence is None:
            bound = ppl
        else:
            bound = math.exp(math.log(ppl) + spread.quantile(self.confidence))
        return GateVerdict(
            passes=bound <= cap,
            bound=bound,
            pass_probability=probability,
            stderr_log_ppl=stderr_log_ppl,
            records=records,
            rerun_records=rerun,
            paired_stderr=paired_used[0] if paired_used else None,
            paired_records=paired_used[1] if paired_used else None,
        )

    def cap_for(self, reference_ppl: float | None) -> float | None:
        """The cap in force: None while a relative cap waits for its baseline."""
        if self.cap_rel is None:  # not ``relative``: an absolute cap
            return self.cap
        return None if reference_ppl is None else self.cap_rel * reference_ppl

    @staticmethod
    def model_ppl(ppl: float, cap: float) -> float:
        """The PPL Optuna's models see: an infinite or huge one counts as twice the cap."""
        return min(ppl, 2 * cap)

    @classmethod
    def constraint(cls, ppl: float, cap: float) -> float:
        """Optuna's constraint value: <= 0 passes."""
        return cls.model_ppl(ppl, cap) - cap


@dataclasses.dataclass(frozen=True, kw_only=True)
class GateVerdict:
    """One trial judged: ``bound`` is the PPL compared with the cap (the point or the upper bound).

    ``pass_probability``: the chance that PPL on ``rerun_records`` fresh
    records stays under the cap (None: no standard error was known).
    """

    passes: bool
    bound: float
    pass_probability: float | None
    stderr_log_ppl: float | None
    records: int | None
    rerun_records: int | None
    paired_stderr: float | None = None  # the relative cap judged on the records both scored
    paired_records: int | None = None  # how many records that was

    def extras(self) -> dict[str, Any]:
        """What the trial stores (``sweeper_trials.extras``)."""
        if self.stderr_log_ppl is None:
            return {}
        return {
            STDERR_KEY: self.stderr_log_ppl,
            RECORDS_KEY: self.records,
            BOUND_KEY: self.bound,
            PASS_PROBABILITY_KEY: self.pass_probability,
            RERUN_RECORDS_KEY: self.rerun_records,
            **(
                {}
                if self.paired_stderr is None
                else {PAIRED_KEY: self.paired_stderr, PAIRED_RECORDS_KEY: self.paired_records}
            ),
        }


def measured_uncertainty(
    extras: Mapping[str, Any], requests: Sequence[Mapping[str, Any]] = ()
) -> tuple[float | None, int | None]:
    """A measurement's (standard error of log PPL, records scored), None where unknown.

    ``extras[STDERR_KEY]`` when the evaluator gives it, else computed from the
    per-record rows (``kind: ppl`` with ``nll`` and ``tokens``) that
    ``ServerEvaluator`` returns; a trial stopped early has no usable figure.
    """
    stderr, records = extras.get(STDERR_KEY), extras.get(RECORDS_KEY)
    if isinstance(stderr, (int, float)) and isinstance(records, int):
        return float(stderr), records
    scores = _ppl_scores(requests)
    if len(scores) < 2:
        return None, None
    stderr = record_stderr(scores)
    return (stderr, len(scores)) if math.isfinite(stderr) else (None, None)


def _ppl_scores(requests: Sequence[Mapping[str, Any]]) -> list[RecordScore]:
    """A measurement's per-record PPL rows (``kind: ppl``) in order; empty when unusable."""
    scores = []
    for row in requests:
        if row.get("kind") != "ppl":
            continue
        nll, tokens = row.get("nll"), row.get("tokens")
        if not isinstance(tokens, int) or tokens <= 0:
            return []
        ident = row.get("id")
        scores.append(
            RecordScore(
                id="" if ident is None else str(ident),
                nll=math.inf if nll is None else float(nll),
                tokens=tokens,
            )
        )
    return scores


def record_rows(requests: Sequence[Mapping[str, Any]]) -> dict[str, RecordScore]:
    """A measurement's per-record PPL rows by record id, to pair with another measurement's.

    Empty when unusable for pairing: a row without an id, or an id twice (records
    cannot be matched then; ``measured_uncertainty`` still uses the rows).
    """
    scores = _ppl_scores(requests)
    by_id = {s.id: s for s in scores}
    if any(not s.id for s in scores) or len(by_id) < len(scores):
        if scores:
            logger.warning(
                "per-record PPL rows without ids or with an id twice: they cannot be paired with the baseline's"
            )
        return {}
    return by_id


def paired_stderr(trial: Mapping[str, RecordScore], baseline: Mapping[str, RecordScore]) -> tuple[float, int] | None:
    """Standard error of log(PPL / baseline PPL) from the per-record differences, and the
    records it rests on (``evaluators.paired_log_ppl``); None when they cannot be paired."""
    paired = paired_log_ppl(trial, baseline)
    return None if paired is None else (paired.stderr, paired.records)


def uncertainty_extras(extras: Mapping[str, Any], requests: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """``{ppl_stderr_records, ppl_records}`` of a measurement (``measured_uncertainty``), to store
    with a PPL that no gate judged (a verification repeat); empty when unknown."""
    stderr, records = measured_uncertainty(extras, requests)
    return {} if stderr is None or records is None else {STDERR_KEY: stderr, RECORDS_KEY: records}


def stored_estimate(ppl: float | None, extras: Mapping[str, Any]) -> PplEstimate | None:
    """A stored trial's PPL with its uncertainty, from what ``GateVerdict.extras`` wrote."""
    stderr, records = extras.get(STDERR_KEY), extras.get(RECORDS_KEY)
    if ppl is None or not isinstance(stderr, (int, float)) or not isinstance(records, int):
        return None
    if records < 1 or not math.isfinite(float(stderr)):
        return None
    return PplEstimate(ppl=float(ppl), stderr_log_ppl=float(stderr), records=records)


def trial_pass_probability(
    ppl: float | None, extras: Mapping[str, Any], cap: float, new_records: int | None
) -> float | None:
    """The chance that a stored trial's PPL on ``new_records`` fresh records is at most ``cap``.

    For verify and status: ``ppl`` and ``extras`` of a ``TrialRecord``; None
    when the trial stored no standard error. ``new_records`` None: the
    records' population (the "true" PPL).
    """
    estimate = stored_estimate(ppl, extras)
    return None if estimate is None else estimate.pass_probability(cap, new_records)


def reference_ppl(study: optuna.Study) -> float | None:
    value = study.user_attrs.get(REFERENCE_ATTR)
    return float(value) if value is not None else None


def reference_trial(study: optuna.Study) -> int | None:
    """The number of the trial that measured the baseline PPL (None: not yet)."""
    value = study.user_attrs.get(REFERENCE_TRIAL_ATTR)
    return int(value) if value is not None else None


def reference_estimate(study: optuna.Study) -> PplEstimate | None:
    """The baseline's PPL with its uncertainty (None: not measured, or no standard error)."""
    attrs = study.user_attrs
    ppl, stderr, records = (
        attrs.get(REFERENCE_ATTR),
        attrs.get(REFERENCE_STDERR_ATTR),
        attrs.get(REFERENCE_RECORDS_ATTR),
    )
    if ppl is None or stderr is None or not isinstance(records, int):
        return None
    return PplEstimate(ppl=float(ppl), stderr_log_ppl=float(stderr), records=records)


def set_reference(
    study: optuna.Study,
    ppl: float,
    trial_number: int,
    *,
    stderr_log_ppl: float | None = None,
    records: int | None = None,
) -> None:
    if stderr_log_ppl is not None and records is not None and math.isfinite(stderr_log_ppl):
        study.set_user_attr(REFERENCE_STDERR_ATTR, stderr_log_ppl)
        study.set_user_attr(REFERENCE_RECORDS_ATTR, records)
    study.set_user_attr(REFERENCE_ATTR, ppl)
    study.set_user_attr(REFERENCE_TRIAL_ATTR, trial_number)
    logger.info("baseline PPL %.4f measured by trial %d", ppl, trial_number)


def wait_for_reference(
    study: optuna.Study,
    baseline_done: Callable[[], bool],
    *,
    poll_s: float = 2.0,
    should_stop: Callable[[], bool] = lambda: False,
) -> float:
    """Block until another worker's baseline trial has set the reference PPL."""
    while True:
        value = reference_ppl(study)
        if value is not None:
            return value
        if baseline_done():
            raise StudyError(
                "the baseline trial ended without a PPL, so the relative cap cannot be "
                f"computed: look at the baseline trial with '{invocation.command('status --trial N')}'"
            )
        if should_stop():
            raise StudyError("stopped while waiting for the baseline trial's PPL")
        time.sleep(poll_s)


def _measured_uncertainty(stderr_log_ppl: float | None, records: int | None) -> tuple[float, int] | None:
    """A trial's standard error of log PPL and its records, when they make an interval."""
    if stderr_log_ppl is None or records is None or records < 2:
        return None
    if not math.isfinite(stderr_log_ppl) or stderr_log_ppl < 0:
        return None
    return stderr_log_ppl, records
