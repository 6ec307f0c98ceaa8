"""The default evaluator of a study: one real server per trial.

``ServerEvaluator(base_manifest, settings, run_dir=...)`` is the study's
``Evaluator``: ``run_study`` calls it as ``evaluator(params, context)``. Per
trial it renders the base manifest with the trial's env overrides and runs
``evaluate`` on it (start, PPL first with an early stop at the cap in
force, warm-up, TPS, greedy fidelity when a reference is given, stop).
Phase timings, the rendered manifest (secrets redacted), the server token
and the log tail reach the study database while the trial runs, so a crash
loses none of them.

A failure is classified (``sweeper.serving.classify``) and raised with its
kind. A start that failed transiently (out of memory, a crash, a busy port)
is tried once more in a fresh server, after ``before_retry()``: the seam
where a device-aware caller waits until the GPU memory of the failed server
is free again (on CPU there is nothing to wait for). A refusal (the server
rejected its configuration) is not retried: it is deterministic.
``trial_timeout_s`` is the trial's wall-clock limit derived from the sizes
(see ``trial_limit_s``); the study enforces it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evaluators import PplSettings, TpsResult, WarmupSettings, request_interval
from sweeper.devices import DeviceSlot
from sweeper.errors import MeasurementError, ServerError
from sweeper.manifest import Manifest
from sweeper.measure._evaluate import (
    EvalData,
    EvalResult,
    EvalSettings,
    ServerHooks,
    evaluate,
    load_eval_data,
    warmup_settings_from,
)
from sweeper.measure._on_device import DeviceHooks
from sweeper.serving import (
    COMPILE_CACHE_VARIABLE,
    CompileCache,
    FailureKind,
    ServerProcess,
    WarmStarts,
    classify,
    shared_launchers,
    with_kind,
)
from sweeper.study import EvaluationContext, Measurement, is_baseline, is_confirmation
from sweeper.versions import software_versions

logger = logging.getLogger(__name__)

# evaluate's phase names as the study stores and shows them
STUDY_PHASE_NAMES = {"ready": "start", "server": "start"}
START_ATTEMPTS = 2  # a transient start failure is tried once more in a fresh server
# what a stop may take: SIGTERM grace (30 s), SIGKILL wait, the token sweep, the port check
TEARDOWN_BOUND_S = 90.0
# the slowest server a trial limit allows for, on average over the trial: a base per request,
# output tokens at 20 tokens/s (the challenge's bf16 baseline runs 44), prompt tokens scored
# at 2,000 tokens/s; a hung server is caught sooner, by the first request that times out
REQUEST_BOUND_S = 2.0
DECODE_FLOOR_TOKENS_PER_S = 20.0
PREFILL_FLOOR_TOKENS_PER_S = 2000.0


def trial_limit_s(settings: EvalSettings, data: EvalData, warmup: WarmupSettings | None) -> float:
    """A trial's wall-clock limit from its sizes: what each step may take, summed.

    Start (the ready timeout) and teardown twice (a start may be retried);
    per PPL record ``REQUEST_BOUND_S`` plus its tokens at
    ``PREFILL_FLOOR_TOKENS_PER_S``; per request of the warm-up bridge, the
    TPS run (its warm-up requests included) and the fidelity check,
    ``REQUEST_BOUND_S`` plus its output tokens at ``DECODE_FLOOR_TOKENS_PER_S``.
    The challenge's sizes (128 records of 97,145 tokens, 64 bridge prompts,
    4 + 128 requests of 512 tokens) give 2 x 990 + 305 + 131 + 3,643 s:
    about 1 h 40 min.
    """

    def decode(output_len: int) -> float:
        return REQUEST_BOUND_S + output_len / DECODE_FLOOR_TOKENS_PER_S

    limit = START_ATTEMPTS * (settings.ready_timeout_s + TEARDOWN_BOUND_S)
    if settings.ppl is not None and data.ppl_records is not None:
        records = list(data.ppl_records)
        if settings.ppl.max_records:
            records = records[: settings.ppl.max_records]
        limit += sum(REQUEST_BOUND_S + len(r.token_ids) / PREFILL_FLOOR_TOKENS_PER_S for r in records)
    if warmup is not None and warmup.enabled:
        limit += warmup.num_prompts * decode(warmup.max_tokens)
    if settings.tps is not None and data.prompts is not None:
        count = min(settings.tps.num_prompts, len(data.prompts))
        limit += (settings.tps.warmup_requests + count) * decode(settings.tps.output_len)
    if data.reference is not None:
        limit += len(data.reference.entries) * decode(data.reference.output_len)
    return limit


def starts_warm(warm_starts: WarmStarts, role: str, attempt: int = 1) -> bool:
    """Does the server of a trial with ``role`` start warm? A retried start (``attempt`` > 1) is
    always fresh, and under ``WarmStarts.SEARCH`` so is every server whose reading a claim may rest
    on: the base manifest's own trial and the race servers."""
    if attempt > 1 or warm_starts is WarmStarts.OFF:
        return False
    claimed = is_confirmation(role) or is_baseline(role)
    return warm_starts is WarmStarts.ALL or not claimed


class ServerEvaluator:
    """Measures one configuration per call with a fresh server."""

    def __init__(
        self,
        base_manifest: Manifest,
        settings: EvalSettings,
        *,
        run_dir: str | Path,
        data: EvalData | None = None,
        before_retry: Callable[[], None] | None = None,
        device: DeviceSlot | None = None,
        warm_starts: WarmStarts = WarmStarts.OFF,
        compile_cache: CompileCache | None = None,
    ) -> None:
        self.base_manifest = base_manifest
        self.warm_starts = warm_starts  # which trials' servers start from a warm launcher
        self.compile_cache = compile_cache  # None: vLLM's own default folder
        if warm_starts is not WarmStarts.OFF:
            shared_launchers().log_folder = Path(run_dir)
        self.device = device  # the worker's GPUs: memory wait, CUDA_VISIBLE_DEVICES, provenance
        self.settings = settings
        self.run_dir = Path(run_dir)
        # the data is loaded and checked once, before any server time is spent
        self.data = data if data is not None else load_eval_data(base_manifest, settings)
        self.versions = software_versions()
        # called before a failed start is tried again (a GPU worker waits for free memory)
        self.before_retry = before_retry or (lambda: None)
        warmup = settings.warmup or warmup_settings_from(base_manifest, settings.overrides)
        self.trial_timeout_s = trial_limit_s(settings, self.data, warmup)

    def manifest_for(self, overrides: Mapping[str, str], number: int | str) -> Manifest:
        return self.base_manifest.render(
            {**self.settings.overrides, **overrides}, name=f"{self.base_manifest.name}-trial-{number}"
        )

    def __call__(self, params: Mapping[str, Any], context: EvaluationContext) -> Measurement:
        manifest = self.manifest_for(context.overrides, context.number)
        context.set_manifest(manifest.redacted().to_dict())
        folder = self.run_dir / f"trial-{context.number:04d}"
        first_failure: ServerError | MeasurementError | None = None
        floor = getattr(context, "screen_floor", None) if self.settings.screen else None
        for attempt in range(1, START_ATTEMPTS + 1):
            settings = dataclasses.replace(
                self.settings,
                ppl=self._ppl_settings(context),
                # a screen only where the study asks for one (not for a re-measurement)
                screen=self.settings.screen if floor is not None else None,
                screen_floor=floor,
                # the manifest's overrides are already rendered; the worker's devices win over it
                overrides={
                    **(self.device.server_env() if self.device else {}),
                    **self._compile_cache_env(manifest, context, folder),
                },
                warm_start=self._warm(context, attempt),
                log_path=folder / ("server.log" if attempt == 1 else f"server-{attempt}.log"),
            )
            context_hooks = _ContextHooks(context)
            hooks: ServerHooks = context_hooks
            if self.device is not None:
                # waits for the GPUs' memory before each start (a retried one too), samples the peak
                context.set_device(self.device.describe())
                hooks = DeviceHooks(self.device, context_hooks)
            try:
                result = evaluate(manifest, settings, data=self.data, progress=_PhaseForwarder(context), hooks=hooks)
                assert context_hooks.server is not None  # evaluate creates the server first
                measurement = self._measurement(result, context, manifest, context_hooks.server)
                server = context_hooks.server
                extras = {**measurement.extras, "server_start": server.start_kind}
                if server.start_note:
                    extras["server_start_note"] = server.start_note
                if context_hooks.compile_cache_dirs:
                    extras["compile_cache_dirs"] = list(context_hooks.compile_cache_dirs)
                if COMPILE_CACHE_VARIABLE in settings.overrides:
                    extras["compile_cache_root"] = settings.overrides[COMPILE_CACHE_VARIABLE]
                measurement = dataclasses.replace(measurement, extras=extras)
                if context_hooks.compile_s is not None:  # part of the engine init phase, told apart
                    extras = {**measurement.extras, "compile_s": context_hooks.compile_s}
                    if context_hooks.compile_cache_hit is not None:
                        extras["compile_cache_hit"] = context_hooks.compile_cache_hit
                    measurement = dataclasses.replace(measurement, extras=extras)
                if isinstance(hooks, DeviceHooks):
                    measurement = hooks.provenance(measurement)
            except (ServerError, MeasurementError) as exc:
                failure, kind, at_start = self._classified(exc, context_hooks)
                if not (at_start and kind.retry_at_start and attempt < START_ATTEMPTS):
                    raise failure from (exc if failure is not exc else exc.__cause__)
                first_failure = failure
                logger.warning(
                    "trial %d: the server failed to start (%s): trying once more in a fresh server",
                    context.number,
                    kind.value,
                )
                self.before_retry()
                continue
            if first_failure is not None:
                extras = dict(measurement.extras)
                extras["start_attempts"] = attempt
                extras["first_start_failure"] = f"{first_failure.kind}: {first_failure}"[:2000]
                measurement = dataclasses.replace(measurement, extras=extras)
            return measurement
        raise AssertionError("unreachable: the last attempt returns or raises")

    @staticmethod
    def _classified(
        exc: ServerError | MeasurementError, hooks: _ContextHooks
    ) -> tuple[ServerError | MeasurementError, FailureKind, bool]:
        """The error with its kind, the kind, and whether the server never became ready."""
        server = hooks.server
        at_start = server is None or server.ready_seconds is None
        log_tail = getattr(exc, "log_tail", "") or (server.log_tail() if server else "")
        kind = classify(log_tail, exc, during_start=at_start, server_exited=hooks.exited_early)
        return with_kind(exc, kind), kind, at_start

    # -- helpers ----------------------------------------------------------------

    def _compile_cache_env(self, manifest: Manifest, context: EvaluationContext, folder: Path) -> dict[str, str]:
        if self.compile_cache is None:
            return {}
        return self.compile_cache.env_for(manifest.env, context.overrides, manifest.serve, folder)

    def _warm(self, context: EvaluationContext, attempt: int) -> bool:
        return starts_warm(self.warm_starts, context.role, attempt)

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
        if tps is not None and tps.tps is not None:
            extras.update(_tps_interval(tps))
        screen = result.screen
        screened = screen is not None and tps is None and not early
        if screen is not None and screen.tps is not None:
            extras["tps_screen"] = screen.tps
            extras["screen_size"] = f"{screen.settings.num_prompts}x{screen.settings.output_len}"
        elif screen is not None and screened:  # a screen that failed its requests is a failed measurement
            raise MeasurementError(f"TPS screen failed: {screen.completed}/{screen.total} requests completed")
        if ppl is not None:
            extras["ppl_low"], extras["ppl_high"] = ppl.ppl_low, ppl.ppl_high
        if ppl is not None and not ppl.finite:
            extras["ppl_infinite"] = True
        if context.known_ppl is not None:
            extras["ppl_reused_from_trial"] = context.known_ppl_trial
        requests = [{"kind": "tps", **request.to_dict()} for request in (tps.requests if tps else ())]
        if ppl is not None:
            requests += [{"kind": "ppl", **row} for row in ppl.to_dict().get("records", [])]
        return Measurement(
            tps=tps.tps if tps is not None else None,
            ppl=ppl_value,
            early_stopped=early and tps is None,
            screened=screened,
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
        self.exited_early = False  # the server was gone before teardown (it crashed)
        self.compile_s: float | None = None  # vLLM's torch.compile time (within engine init), where it logs it
        self.compile_cache_hit: bool | None = None
        self.compile_cache_dirs: tuple[str, ...] = ()  # vLLM's compile-cache folders (hashes of its key)

    def server_created(self, server: ServerProcess) -> None:
        self.server = server
        self.context.set_server_token(server.token)

    def phase_ended(self, phase: str, seconds: float) -> None:
        if phase != "teardown" and self.server is not None and self.server.process is not None:
            self.exited_early = self.exited_early or not self.server.alive()
        if phase == "ready" and self.server is not None and self.server.ready_seconds is not None:
            split = self._start_split(seconds)
            if split:
                for name, part in split:
                    self.context.record_phase(name, part)
                return
        self.context.record_phase(STUDY_PHASE_NAMES.get(phase, phase), seconds)

    def _start_split(self, seconds: float) -> tuple[tuple[str, float], ...]:
        """A ready server's start in ``START_PHASES`` (scaled to ``seconds``, the phase as timed
        here), with the compile time and cache beside them; () where its log does not tell."""
        assert self.server is not None
        startup = self.server.startup()
        split = startup.stored()
        if not split:
            return ()
        if startup.compile_s is not None:
            self.compile_s = startup.compile_s
        self.compile_cache_hit = startup.cache_hit
        self.compile_cache_dirs = startup.cache_hashes
        scale = seconds / startup.ready_s if startup.ready_s else 1.0
        return tuple((name, part * scale) for name, part in split)

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


def _tps_interval(tps: TpsResult) -> dict[str, Any]:
    """The run's 95 % interval from its requests (a bootstrap; see evaluators.intervals)."""
    done = [r for r in tps.requests if r.ok and r.latency_s > 0]
    if len(done) < 2:
        return {}
    interval = request_interval([r.output_tokens for r in done], [r.latency_s for r in done], tps=tps.tps)
    return {"tps_low": interval.low, "tps_high": interval.high, "tps_interval": interval.method}
