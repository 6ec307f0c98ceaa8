"""One verification repeat: a fresh server for the candidate or the base, measured on held-out data.

``VerificationContext`` is what the evaluator sees of a repeat (the trial
context, without the trial tables); ``measure_repeat`` runs the evaluator and
returns the repeat as a ``VerificationRun``, failed or complete (an error of
the user's input is raised, never recorded).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from storage import (
    BASE,
    CANDIDATE,
    TrialRecord,
    VerificationRun,
)
from sweeper.answer._verify_settings import BaseConfiguration
from sweeper.errors import ERROR_ROOTS, USER_INPUT_ERRORS, MeasurementError
from sweeper.study import (
    Evaluator,
    Measurement,
    TimedPhases,
    uncertainty_extras,
)

logger = logging.getLogger(__name__)


class VerificationContext(TimedPhases):
    """What an evaluator sees of a verification repeat (the TrialContext interface).

    Nothing is written to the trial tables: phases, the server token, the
    manifest and the log tail are kept here and stored with the repeat.
    For the base's repeat (``subject`` "base") the params are the base's,
    there are no overrides and no cap: its PPL is measured in full (the same
    steps as the candidate's, so that its TPS is measured alike) and shown,
    not judged.
    """

    def __init__(
        self,
        *,
        study_name: str,
        record: TrialRecord,
        repeat: int,
        ppl_cap: float | None,
        subject: str = CANDIDATE,
        base: BaseConfiguration | None = None,
    ) -> None:
        self.study_name = study_name
        self.number = repeat
        self.trial_number = record.number
        self.subject = subject
        # typed as the EvaluationContext protocol reads them
        self.params: Mapping[str, Any]
        self.overrides: Mapping[str, str]
        if subject == BASE:
            self.params = dict(base.params or {}) if base else {}
            self.overrides = {}
            self.role = f"verify #{record.number} base"
        else:
            self.params = dict(record.params)
            self.overrides = dict(record.overrides)
            self.role = f"verify #{record.number}"
        self.ppl_cap = ppl_cap
        self.known_ppl: float | None = None
        self.known_ppl_trial: int | None = None
        self.stop_requested = False
        self.phases: dict[str, float] = {}
        self.server_token: str | None = None
        self.manifest: Mapping[str, Any] | None = None
        self.log_tail = ""

    def record_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + float(seconds)

    def notify_phase(self, name: str, done: int | None = None, total: int | None = None) -> None:
        """Phases of a repeat are not shown one by one (verify reports whole repeats)."""

    def notify_progress(self, name: str, done: int, total: int) -> None:
        """Not shown either."""

    def set_server_token(self, token: str) -> None:
        self.server_token = token

    def set_manifest(self, manifest: Mapping[str, Any]) -> None:
        self.manifest = dict(manifest)

    def set_log_tail(self, text: str) -> None:
        self.log_tail = text

    def set_device(self, device: Mapping[str, str]) -> None:
        self.device = dict(device)


def measure_repeat(
    evaluate: Evaluator,
    study_name: str,
    record: TrialRecord,
    repeat: int,
    cap: float | None,
    *,
    subject: str = CANDIDATE,
    base: BaseConfiguration | None = None,
) -> VerificationRun:
    context = VerificationContext(
        study_name=study_name, record=record, repeat=repeat, ppl_cap=cap, subject=subject, base=base
    )
    whose = f"trial {record.number}" if subject == CANDIDATE else f"the base beside trial {record.number}"
    began = time.monotonic()
    try:
        measurement = evaluate(dict(context.params), context)
        if not isinstance(measurement, Measurement):
            raise MeasurementError(f"the evaluator returned {type(measurement).__name__}, not a Measurement")
    except (*ERROR_ROOTS, OSError) as exc:
        if isinstance(exc, USER_INPUT_ERRORS):
            raise
        logger.warning("verification of %s, repeat %d failed: %s", whose, repeat + 1, exc)
        return VerificationRun(
            repeat=repeat,
            subject=subject,
            state="failed",
            error_kind=type(exc).__name__,
            error_message=str(exc),
            phases=dict(context.phases),
            log_tail=getattr(exc, "log_tail", "") or context.log_tail or None,
            seconds=time.monotonic() - began,
        )
    # the evaluator's own timings, and those it reported through the context (start, teardown)
    phases = {**{k: float(v) for k, v in measurement.phases.items()}, **context.phases}
    # the held-out PPL's standard error (records as the sampling unit), from its per-record rows
    extras = {**measurement.extras, **uncertainty_extras(measurement.extras, measurement.requests)}
    return VerificationRun(
        repeat=repeat,
        subject=subject,
        state="complete",
        tps=measurement.tps,
        ppl=math.inf if measurement.extras.get("ppl_infinite") else measurement.ppl,
        early_stopped=measurement.early_stopped,
        phases=phases,
        extras=extras,
        log_tail=measurement.log_tail or context.log_tail or None,
        seconds=time.monotonic() - began,
    )
