"""The default evaluator of a study: one real server per trial.

``ServerEvaluator(base_manifest, settings, run_dir=...)`` is the study's
``Evaluator``: ``run_study`` calls it as ``evaluator(params, context)``. Per
trial it renders the base manifest with the trial's env overrides and runs
``evaluate`` on it (start, PPL first with an early stop at the cap in
force, warm-up, TPS, greedy fidelity when a reference is given, stop).
Phase timings, the rendered manifest (secrets redacted), the server token
and the log tail reach the study database while the trial runs, so a crash
loses none of them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluators import PplSettings
from sweeper.devices import DeviceSlot
from sweeper.errors import MeasurementError
from sweeper.manifest import Manifest
from sweeper.measure._evaluate import EvalData, EvalResult, EvalSettings, ServerHooks, evaluate
from sweeper.measure._evaluate import load_eval_data
from sweeper.measure._on_device import DeviceHooks
from sweeper.serving import ServerProcess
from sweeper.study import EvaluationContext, Measurement
from sweeper.versions import software_versions

logger = logging.getLogger(__name__)

# evaluate's phase names as the study stores and shows them
STUDY_PHASE_NAMES = {"ready": "start", "server": "start"}


class ServerEvaluator:
    """Measures one configuration per call with a fresh server."""

    def __init__(
        self,
        base_manifest: Manifest,
        settings: EvalSettings,
        *,
        run_dir: str | Path,
        data: EvalData | None = None,
        device: DeviceSlot | None = None,
    ) -> None:
        self.base_manifest = base_manifest
        self.device = device  # the worker's GPUs: memory wait, CUDA_VISIBLE_DEVICES, provenance
        self.settings = settings
        self.run_dir = Path(run_dir)
        # the data is loaded and checked once, before any server time is spent
        self.data = data if data is not None else load_eval_data(base_manifest, settings)
        self.versions = software_versions()

    def manifest_for(self, overrides: Mapping[str, str], number: int | str) -> Manifest:
        return self.base_manifest.render(
            {**self.settings.overrides, **overrides}, name=f"{self.base_manifest.name}-trial-{number}"
        )

    def __call__(self, params: Mapping[str, Any], context: EvaluationContext) -> Measurement:
        manifest = self.manifest_for(context.overrides, context.number)
        context.set_manifest(manifest.redacted().to_dict())
        settings = dataclasses.replace(
            self.settings,
            ppl=self._ppl_settings(context),
            # the manifest's overrides are already rendered; the worker's devices win over it
            overrides=self.device.server_env() if self.device else {},
            log_path=self.run_dir / f"trial-{context.number:04d}" / "server.log",
        )
        hooks = context_hooks = _ContextHooks(context)
        if self.device is not None:
            context.set_device(self.device.describe())
            hooks = DeviceHooks(self.device, context_hooks)
        result = evaluate(
            manifest, settings, data=self.data, progress=_PhaseForwarder(context), hooks=hooks
        )
        assert context_hooks.server is not None  # evaluate creates the server before anything else
        measurement = self._measurement(result, context, manifest, context_hooks.server)
        return hooks.provenance(measurement) if isinstance(hooks, DeviceHooks) else measurement

    # -- helpers ----------------------------------------------------------------

    def _ppl_settings(self, context: EvaluationContext) -> PplSettings | None:
        if self.settings.ppl is None or context.known_ppl is not None:
            return None  # not asked for, or reused from a trial with the same outputs
        return dataclasses.replace(self.settings.ppl, stop_above=context.ppl_cap)

    def _measurement(
        self, result: EvalResult, context: EvaluationContext, manifest: Manifest, server: ServerProcess
    ) -> Measurement:
        ppl = result.ppl
        tps = result.tps
        early = bool(ppl is not None and ppl.stopped_early)
        if tps is not None and not tps.ok:
            raise MeasurementError(
                f"TPS measurement failed: {tps.completed}/{tps.total} requests completed"
                + (f" ({tps.first_error})" if getattr(tps, "first_error", None) else "")
            )
        # an infinite PPL (a -inf or NaN logprob) is a gate failure, not a crash
        ppl_value = None if ppl is None else (ppl.ppl if ppl.finite else math.inf)
        summary = result.to_dict(details=False)
        extras = {
            key: summary[key]
            for key in (
                "completed",
                "total",
                "output_tokens",
                "duration_s",
                "ppl_tokens",
                "ppl_records",
                "ppl_stopped_early",
                "spec_drafts",
                "spec_draft_tokens",
                "spec_accepted_tokens",
                "spec_acceptance_rate",
                "spec_per_position_acceptance",
                "mean_acceptance_length",
                "fidelity",
            )
            if summary.get(key) is not None
        }
        if ppl is not None:
            extras["ppl_low"], extras["ppl_high"] = ppl.ppl_low, ppl.ppl_high
        if ppl is not None and not ppl.finite:
            extras["ppl_infinite"] = True
        if context.known_ppl is not None:
            extras["ppl_reused_from_trial"] = context.known_ppl_trial
        requests = [
            {"kind": "tps", **request.to_dict()} for request in (tps.requests if tps else ())
        ]
        if ppl is not None:
            requests += [{"kind": "ppl", **row} for row in ppl.to_dict().get("records", [])]
        return Measurement(
            tps=tps.tps if tps is not None else None,
            ppl=ppl_value,
            early_stopped=early and tps is None,
            extras=extras,
            phases={},  # already stored through the context as each phase ended
            requests=requests,
            manifest=manifest.redacted().to_dict(),
            log_tail=server.log_tail(),
            server_token=server.token,
            versions=self.versions,
        )


class _ContextHooks(ServerHooks):
    """Stores what ``evaluate`` reports in the trial's context as it happens."""

    def __init__(self, context: EvaluationContext) -> None:
        self.context = context
        self.server: ServerProcess | None = None

    def server_created(self, server: ServerProcess) -> None:
        self.server = server
        self.context.set_server_token(server.token)

    def phase_ended(self, phase: str, seconds: float) -> None:
        self.context.record_phase(STUDY_PHASE_NAMES.get(phase, phase), seconds)

    def server_stopped(self, server: ServerProcess) -> None:
        self.context.set_log_tail(server.log_tail())


class _PhaseForwarder:
    """Turns the evaluators' progress calls into the study's phase events."""

    def __init__(self, context: EvaluationContext) -> None:
        self.context = context
        self.current: str | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        phase = STUDY_PHASE_NAMES.get(phase, phase)
        if phase != self.current:
            self.current = phase
            self.context.notify_phase(phase, done, total)
        else:
            self.context.notify_progress(phase, done, total)

