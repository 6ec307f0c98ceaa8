"""What a trial's measurement comes to: the outcome stored for it, judged by the gate.

``TrialJudge`` reads what the study's stored trials offer a new trial (a PPL
already measured with the same quality parameters, the screen's floor from
the incumbent) and turns an evaluator's ``Measurement`` into the
``TrialOutcome`` stored: the cap in force (under a relative cap the
baseline sets it, and other trials wait for it), the gate's verdict (paired
with the baseline's per-record rows where both have them), and the TPS that
stands in where none was measured in full (the screen's figure scaled, else
the slowest seen). A refusal is judged here too: infeasible under the cap in
force. ``TrialRunner`` (``_trial.py``) runs the trial around it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from evaluators.intervals import screen_floor
from search_spaces import BASELINE, SearchSpace
from storage import TrialOutcome, TrialStore
from sweeper.errors import MeasurementError, StorageError, StudyError
from sweeper.study._evaluator import Measurement, TrialContext
from sweeper.study._gate import (
    PplGate,
    measured_uncertainty,
    paired_stderr,
    record_rows,
    reference_estimate,
    reference_ppl,
    reference_trial,
    set_reference,
    wait_for_reference,
)
from sweeper.study._options import StudyOptions
from sweeper.study._race_replay import standing
from sweeper.study._recovery import RETRIED_ATTR, ROLE_ATTR
from sweeper.study._standing import Standing, is_confirmation
from sweeper.versions import software_versions

logger = logging.getLogger(__name__)
# how long a trial waits for the baseline's per-record PPL rows to pair its own with
PAIRING_WAIT_S = 30.0


def is_baseline(role: str) -> bool:
    return BASELINE in role.split("+")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class TrialJudge:
    """A trial's outcome from its measurement, by the study's gate and stored trials (module docstring)."""

    study: optuna.Study
    store: TrialStore
    space: SearchSpace
    gate: PplGate
    options: StudyOptions
    stop_event: threading.Event

    def known_ppl(self, params: Mapping[str, Any], role: str) -> tuple[float | None, int | None]:
        """A PPL measured before with the same quality parameters (always reused by a re-measurement)."""
        if not self.options.reuse_quality and not is_confirmation(role):
            return None, None
        key = self.space.quality_key(params)
        for record in self.store.records(self.study.study_name, states=["complete"]):
            if (
                record.ppl is not None
                and record.ppl_reused_from is None
                and not record.early_stopped
                and self.space.quality_key(record.params) == key
            ):
                return record.ppl, record.number
        return None, None

    def _incumbent_screens(self) -> tuple[Standing, list[tuple[float, float]]]:
        """The standing, and (full TPS, screen TPS) of each incumbent trial that ran a screen."""
        records = self.store.records(self.study.study_name)
        now = standing(records, self.options.confirm)
        if now.incumbent is None:
            return now, []
        by_number = {r.number: r for r in records}
        pairs = []
        for number in now.incumbent.numbers:
            record = by_number.get(number)
            screen = record.extras.get("tps_screen") if record is not None else None
            if record is not None and record.tps and isinstance(screen, (int, float)) and screen > 0:
                pairs.append((float(record.tps), float(screen)))
        return now, pairs

    def _from_screen(self, screen_tps: float) -> float:
        """A screened-out trial's full TPS as the incumbent's full/screen ratio predicts it.

        Stored as imputed (never an answer) but told to the samplers as a speed
        figure: it is measured, at a lower fidelity, and the search needs it.
        """
        _, pairs = self._incumbent_screens()
        if not pairs:
            return screen_tps
        return screen_tps * math.exp(sum(math.log(full / screen) for full, screen in pairs) / len(pairs))

    def screen_floor(self, role: str) -> float | None:
        """The screen TPS below which a new configuration cannot beat the study's best.

        The incumbent's screen figures (geometric mean), less two standard
        errors of a difference of single figures at the study's spread: a
        contender that reads below that in the screen is very unlikely to
        read above the incumbent in full. 0.0 (screen, but measure in full):
        the baseline, and while the incumbent has no screen figure; None (no
        screen at all): re-measurements, whose full figure is what they are for.
        """
        if is_confirmation(role):
            return None
        if is_baseline(role):
            return 0.0
        now, pairs = self._incumbent_screens()
        if not pairs:
            return 0.0
        return screen_floor([screen for _, screen in pairs], spread=now.spread.relative)

    def _paired_with_reference(self, number: int, rows: Sequence[Mapping[str, Any]]) -> tuple[float, int] | None:
        """log(PPL / baseline PPL)'s standard error from the two trials' per-record rows.

        The baseline sets the reference PPL before its own record is stored, so another
        worker may get here first: it waits up to ``PAIRING_WAIT_S`` for the baseline's
        rows. Without them (or without common records) the gate adds the two standard
        errors in quadrature, and says so.
        """
        reference = reference_trial(self.study)
        if reference is None:
            return None
        own = record_rows(rows)
        if not own:  # no per-record rows of its own: nothing to pair (the gate says why)
            return None
        baseline_rows = rows if reference == number else self._baseline_ppl_rows(reference)
        paired = paired_stderr(own, record_rows(baseline_rows))
        if paired is None:
            logger.warning(
                "trial %d: no per-record PPL rows in common with the baseline (trial %d): the "
                "relative cap adds the two standard errors in quadrature",
                number,
                reference,
            )
        return paired

    def _baseline_ppl_rows(self, reference: int) -> Sequence[Mapping[str, Any]]:
        deadline = time.monotonic() + PAIRING_WAIT_S
        while True:
            try:
                record = self.store.record(self.study.study_name, reference, details=True)
            except StorageError:  # not recorded yet
                record = None
            if record is not None and (
                record.state != "running" or any(r.get("kind") == "ppl" for r in record.requests)
            ):
                return record.requests
            if time.monotonic() >= deadline or self.stop_event.is_set():
                return record.requests if record is not None else []
            time.sleep(1.0)

    def cap(
        self,
        role: str,
        ppl: float | None,
        number: int,
        uncertainty: tuple[float | None, int | None] = (None, None),
    ) -> float | None:
        """The cap in force; with a relative gate the baseline sets it, others may wait for it."""
        if not self.gate.relative:
            return self.gate.cap
        reference = reference_ppl(self.study)
        if reference is None and ppl is not None and is_baseline(role):
            stderr, records = uncertainty
            set_reference(self.study, ppl, number, stderr_log_ppl=stderr, records=records)
            reference = ppl
        if reference is None and ppl is not None:
            reference = wait_for_reference(self.study, self._baseline_finished, should_stop=self.stop_event.is_set)
        return self.gate.cap_for(reference)

    def _baseline_finished(self) -> bool:
        """A baseline trial ended and will not be tried again (a queued retry still may)."""
        return any(
            t.state.is_finished()
            and is_baseline(str(t.user_attrs.get(ROLE_ATTR, "")))
            and not t.user_attrs.get(RETRIED_ATTR)
            for t in self.study.get_trials(deepcopy=False)
        )

    def complete(
        self,
        trial: optuna.trial.Trial,
        role: str,
        measurement: Measurement,
        context: TrialContext,
    ) -> TrialOutcome:
        """A measured trial's outcome: its PPL (or the one reused) judged under the cap in force."""
        ppl, reused_from = measurement.ppl, None
        if ppl is None:
            if context.known_ppl is None:
                raise MeasurementError("evaluate returned no PPL, and none could be reused")
            ppl, reused_from = context.known_ppl, context.known_ppl_trial
        uncertainty = measured_uncertainty(measurement.extras, measurement.requests)
        rows: Sequence[Mapping[str, Any]] = measurement.requests
        if reused_from is not None:  # the PPL's figures are the measuring trial's
            measured = self.store.record(self.study.study_name, reused_from, details=self.gate.relative)
            uncertainty = measured_uncertainty(measured.extras)
            rows = measured.requests
        cap = self.cap(role, ppl, trial.number, uncertainty)
        # with a PPL the cap is the absolute one or the baseline's: ``cap`` waits for it or raises
        assert cap is not None
        verdict = self.gate.judge_ppl(
            float(ppl),
            cap,
            stderr_log_ppl=uncertainty[0],
            records=uncertainty[1],
            reference=reference_estimate(self.study) if self.gate.relative else None,
            paired=self._paired_with_reference(trial.number, rows) if self.gate.relative else None,
        )
        tps, imputed = measurement.tps, False
        if tps is None and measurement.screened:  # the screen's figure, scaled, stands in
            tps, imputed = self._from_screen(float(measurement.extras["tps_screen"])), True
        elif tps is None:  # stopped early over the cap: the slowest TPS seen stands in
            tps, imputed = self._slowest_tps(), True
        return TrialOutcome(
            state="complete",
            tps=float(tps),
            ppl=float(ppl),
            ppl_cap=cap,
            feasible=verdict.passes,
            ppl_reused_from=reused_from,
            early_stopped=measurement.early_stopped,
            tps_imputed=imputed,
            extras={
                **measurement.extras,
                **verdict.extras(),
                **({"screened": True} if measurement.screened else {}),
            },
            versions={**software_versions(), **measurement.versions},
            # phases already stored through the context are not stored twice
            phases=[
                (name, seconds)
                for name, seconds in measurement.phases.items()
                if name not in {recorded for recorded, _ in context.recorded_phases}
            ],
            requests=list(measurement.requests),
            manifest=measurement.manifest or context.manifest,
            log_tail=measurement.log_tail or context.log_tail or None,
            server_token=measurement.server_token or context.server_token,
        )

    def refused(self, trial: optuna.trial.Trial, context: TrialContext, outcome: TrialOutcome) -> TrialOutcome:
        """A refusal as stored: infeasible, the cap in force, the slowest TPS seen standing in."""
        if self.gate.relative and reference_ppl(self.study) is None and is_baseline(context.role):
            cap = None  # the baseline itself was refused: nothing can be judged
        elif self.gate.relative and reference_ppl(self.study) is None:
            try:  # another worker runs the baseline
                reference = wait_for_reference(self.study, self._baseline_finished, should_stop=self.stop_event.is_set)
            except StudyError as exc:  # no cap will ever come: recorded as a failure
                logger.warning("trial %d: refused, and no cap to judge it by: %s", trial.number, exc)
                return dataclasses.replace(outcome, state="failed")
            cap = self.gate.cap_for(reference)
        else:
            cap = self.cap(context.role, None, trial.number)
        if cap is None:  # told to Optuna as a failure: see tell_outcome
            return dataclasses.replace(outcome, state="failed")
        return dataclasses.replace(outcome, ppl_cap=cap, feasible=False, tps=self._slowest_tps(), tps_imputed=True)

    def _slowest_tps(self) -> float:
        """The slowest TPS measured so far (0.0 before any): a stand-in where none was read."""
        measured = [
            r.tps
            for r in self.store.records(self.study.study_name, states=["complete"])
            if r.tps is not None and not r.tps_imputed
        ]
        return min(measured) if measured else 0.0
