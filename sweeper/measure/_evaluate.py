"""One evaluation: start a manifest's server, warm it up, measure, tear it down.

::

    data = load_eval_data(manifest, settings)       # once: loads and checks the data
    result = evaluate(manifest, settings, data=data) # per trial: server + measurements
    result.to_dict()["tps"], result.to_dict()["ppl"]

This is the only place where a server is started, measured and stopped:
``sweeper eval`` calls it, and so do the study's ``ServerEvaluator`` (per
trial) and verification (per repeat), which follow the run through
``ServerHooks`` (the server's token as soon as it exists, each phase's
seconds as it ends, the log tail once the server is stopped).

The phases run in this order, each timed: server ready, PPL (first and
untimed, so that a trial clearly over the PPL cap stops before the warm-up
bridge and TPS), warm-up bridge, TPS, greedy fidelity, teardown. Bad data
raises ``DataError`` before any server starts; a server that does not come
up raises a ``ServerError``; a TPS measurement with failed requests is
returned with ``tps`` None (``ok`` False).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from evaluators import (
    FidelityReference,
    FidelityResult,
    PplRecordSet,
    PplResult,
    PplSettings,
    ProgressCallback,
    PromptSet,
    TpsResult,
    TpsSettings,
    WarmupResult,
    WarmupSettings,
    check_ppl_records,
    check_prompt_lengths,
    generate_reference,
    load_ppl_records,
    load_prompts,
    measure_fidelity,
    measure_ppl,
    measure_tps,
    run_warmup,
    served_models,
)
from sweeper.errors import DataError, MeasurementError
from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess, model_limits, shared_launchers

logger = logging.getLogger(__name__)

_Result = TypeVar("_Result")  # what a timed phase returns

SPLIT_PARTS = ("tuning", "heldout")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSplit:
    """One part of a data set split by a seeded fraction (``split_items``: by id, by seed).

    ``heldout_fraction`` of the records (by id hash) form the held-out part,
    the rest the tuning part; the same fraction and seed always give the
    same, disjoint parts, so a study tunes on one and verifies on the other.
    """

    heldout_fraction: float
    seed: int = 0
    part: str = "tuning"

    def __post_init__(self) -> None:
        fraction = self.heldout_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            raise DataError(
                f"--heldout-fraction must be a fraction between 0 and 1 (0.25 = a quarter), not {fraction!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise DataError(f"--split-seed must be an integer, not {self.seed!r}")
        if self.part not in SPLIT_PARTS:
            raise DataError(f"data split part must be one of {', '.join(SPLIT_PARTS)}, not {self.part!r}")

    def of(self, data: Any) -> Any:
        """This part of a ``PromptSet`` or ``PplRecordSet``; DataError if it comes out empty."""
        tuning, heldout = data.split(heldout_fraction=self.heldout_fraction, seed=self.seed)
        chosen = tuning if self.part == "tuning" else heldout
        if not len(chosen):
            raise DataError(
                f"{data.source}: a held-out fraction of {self.heldout_fraction:g} of its "
                f"{len(data)} records leaves the {self.part} part empty"
            )
        return chosen


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """What to measure and with what; ``None`` for ``tps``/``ppl`` skips that phase.

    ``prompts``/``ppl_data``: a file or hub dataset id (None:
    ``default_prompts``/``default_ppl_data``, the sets that the caller
    measures where none is given, as ``sweeper eval`` passes its defaults;
    with neither, a phase that needs the set raises DataError). The default
    is kept apart from what was given, which is what a stored ablation
    records. ``warmup`` None takes the manifest's ``WARMUP_*`` env
    (``WARMUP_BRIDGE=0`` turns it off) over the defaults.
    ``fidelity_reference``: compare against this reference file;
    ``save_reference``: write this server's greedy token ids for the first
    ``reference_prompts`` prompts there (a baseline for later runs).
    ``tps_after_failed_gate``: still measure TPS when PPL stopped early.
    ``prompts_split``/``ppl_split``: use only that part of the loaded set.
    ``keep_port``: start the server on the manifest's own ``port`` (for a
    serve command that does not read ``$PORT``) instead of a free one.
    ``screen``: a short TPS run after the warm-up (multi-fidelity screening);
    with ``screen_floor`` set, a screen that reads below it skips the full
    TPS run (the configuration cannot beat the study's best).
    ``warm_start``: fork the server from this process's warm launcher
    (``sweeper.serving.shared_launchers``) where its serve command allows.
    """

    prompts: str | os.PathLike[str] | None = None
    ppl_data: str | os.PathLike[str] | None = None
    default_prompts: str | os.PathLike[str] | None = None
    default_ppl_data: str | os.PathLike[str] | None = None
    tps: TpsSettings | None = dataclasses.field(default_factory=TpsSettings)
    ppl: PplSettings | None = dataclasses.field(default_factory=PplSettings)
    warmup: WarmupSettings | None = None
    fidelity_reference: str | os.PathLike[str] | None = None
    save_reference: str | os.PathLike[str] | None = None
    reference_prompts: int = 8
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ready_timeout_s: float = 900.0
    log_path: str | os.PathLike[str] | None = None
    tps_after_failed_gate: bool = False
    prompts_split: DataSplit | None = None
    ppl_split: DataSplit | None = None
    keep_port: bool = False
    screen: TpsSettings | None = None
    screen_floor: float | None = None
    warm_start: bool = False

    def __post_init__(self) -> None:
        if self.reference_prompts < 1:
            raise ValueError("EvalSettings.reference_prompts must be at least 1")
        if not self.ready_timeout_s > 0:  # NaN too
            raise ValueError(
                f"EvalSettings.ready_timeout_s must be a positive number of seconds, not {self.ready_timeout_s}"
            )
        for key, value in self.overrides.items():
            if not isinstance(value, str):
                raise ValueError(f"EvalSettings.overrides[{key!r}] must be a string")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalData:
    """The checked data of an evaluation (load once with ``load_eval_data``, reuse per trial)."""

    prompts: PromptSet | None
    ppl_records: PplRecordSet | None
    reference: FidelityReference | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalResult:
    """Everything one evaluation measured; ``to_dict()`` is the ``--json`` object."""

    manifest: str
    overrides: Mapping[str, str]
    model: str
    warmup: WarmupResult | None
    ppl: PplResult | None
    tps: TpsResult | None
    fidelity: FidelityResult | None
    timings: Mapping[str, float]
    screen: TpsResult | None = None
    skipped: tuple[str, ...] = ()
    reference_saved: str | None = None
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        """Every phase that ran completed (TPS: all requests; PPL: finite)."""
        tps_ok = self.tps is None or self.tps.ok
        ppl_ok = self.ppl is None or self.ppl.finite
        return tps_ok and ppl_ok

    def to_dict(self, *, details: bool = True) -> dict[str, Any]:
        tps, ppl, fid = self.tps, self.ppl, self.fidelity
        spec = tps.spec_decode if tps else None
        data: dict[str, Any] = {
            "manifest": self.manifest,
            "overrides": dict(self.overrides),
            "model": self.model,
            "ok": self.ok,
            "tps": tps.tps if tps else None,
            "screen_tps": self.screen.tps if self.screen else None,
            "completed": tps.completed if tps else None,
            "total": tps.total if tps else None,
            "output_tokens": tps.output_tokens if tps else None,
            "duration_s": tps.duration_s if tps else None,
            "ppl": ppl.to_dict(records=False)["ppl"] if ppl else None,
            "ppl_finite": ppl.finite if ppl else None,
            "ppl_tokens": ppl.tokens if ppl else None,
            "ppl_records": ppl.records_scored if ppl else None,
            "ppl_stopped_early": ppl.stopped_early if ppl else None,
            "spec_drafts": spec.drafts if spec else None,
            "spec_draft_tokens": spec.draft_tokens if spec else None,
            "spec_accepted_tokens": spec.accepted_tokens if spec else None,
            "spec_acceptance_rate": spec.acceptance_rate if spec else None,
            "spec_per_position_acceptance": list(spec.per_position_acceptance) if spec else None,
            "mean_acceptance_length": spec.mean_acceptance_length if spec else None,
            "fidelity": fid.fraction_identical if fid else None,
            "timings": dict(self.timings),
            "warmup": self.warmup.to_dict() if self.warmup else None,
            "skipped": list(self.skipped),
            "reference_saved": self.reference_saved,
            "log_path": self.log_path,
        }
        if details:
            data["details"] = {
                "tps": tps.to_dict() if tps else None,
                "ppl": ppl.to_dict() if ppl else None,
                "fidelity": fid.to_dict() if fid else None,
            }
        return data


# -- data ------------------------------------------------------------------


def load_eval_data(manifest: Manifest, settings: EvalSettings) -> EvalData:
    """Load the data the settings ask for and check it against the manifest's model.

    Raises DataError (naming file, record and field) for anything that can be
    seen without a server: wrong shapes, token ids outside the vocabulary,
    records or prompts longer than the server's max_model_len.
    """
    limits = model_limits(manifest, settings.overrides)
    prompts = records = reference = None
    if settings.tps is not None or settings.save_reference is not None:
        prompts = load_prompts(_source(settings.prompts, settings.default_prompts, "prompt set", "prompts"))
        if settings.prompts_split is not None:
            prompts = settings.prompts_split.of(prompts)
    if settings.ppl is not None:
        records = load_ppl_records(_source(settings.ppl_data, settings.default_ppl_data, "PPL records", "ppl_data"))
        if settings.ppl_split is not None:
            records = settings.ppl_split.of(records)
        check_ppl_records(records, vocab_size=limits.vocab_size, max_model_len=limits.max_model_len)
    if settings.fidelity_reference is not None:
        reference = FidelityReference.load(settings.fidelity_reference)
    if prompts is not None and settings.tps is not None and limits.max_model_len:
        counter = limits.chat_token_counter()
        if counter is not None:
            check_prompt_lengths(
                prompts.head(settings.tps.num_prompts),
                count_tokens=counter,
                output_len=settings.tps.output_len,
                max_model_len=limits.max_model_len,
                source=prompts.source,
            )
    return EvalData(prompts=prompts, ppl_records=records, reference=reference)


def _source(
    given: str | os.PathLike[str] | None, default: str | os.PathLike[str] | None, what: str, field: str
) -> str | os.PathLike[str]:
    """The data set given, else the default one; DataError with neither."""
    source = given or default
    if not source:
        raise DataError(f"no {what} to measure with: EvalSettings.{field} is not given and has no default")
    return source


def warmup_settings_from(manifest: Manifest, overrides: Mapping[str, str] | None = None) -> WarmupSettings:
    """The warm-up bridge as the manifest's ``WARMUP_*`` env describes it (else the defaults)."""
    env = {**manifest.env, **(overrides or {})}
    defaults = WarmupSettings()
    try:
        return WarmupSettings(
            enabled=env.get("WARMUP_BRIDGE", "1").strip().lower() not in ("0", "false", "no", "off"),
            num_prompts=int(env.get("WARMUP_NUM_PROMPTS", defaults.num_prompts)),
            max_tokens=int(env.get("WARMUP_MAX_TOKENS", defaults.max_tokens)),
            seed=int(env.get("WARMUP_SEED", defaults.seed)),
        )
    except ValueError as exc:
        raise DataError(f"{manifest.source or manifest.name}: WARMUP_* env: {exc}") from None


# -- running ---------------------------------------------------------------


class ServerHooks:
    """What an ``evaluate`` call tells its caller while it runs; every method is a no-op here.

    Subclass and override what you need: ``server_created`` comes before the
    server starts (its token is known), ``phase_ended`` after each phase
    (``ready``, ``ppl``, ``warmup``, ``tps``, ``fidelity``, ``reference``,
    ``teardown``), also when the phase raised, and ``server_stopped`` after
    the stop (its log is then complete), also when the stop itself failed.
    """

    def server_created(self, server: ServerProcess) -> None:
        """The server exists and is about to start."""

    def phase_ended(self, phase: str, seconds: float) -> None:
        """A phase ended (or raised) after ``seconds``."""

    def server_stopped(self, server: ServerProcess) -> None:
        """The server was stopped (or its stop failed); its log is complete."""


def evaluate(
    manifest: Manifest,
    settings: EvalSettings | None = None,
    *,
    data: EvalData | None = None,
    progress: ProgressCallback | None = None,
    hooks: ServerHooks | None = None,
) -> EvalResult:
    """Start the manifest's server with ``settings.overrides``, measure, stop it.

    ``progress(phase, done, total)`` also gets ``(phase, 0, 0)`` when a phase
    without a count begins ("server", "teardown"). The server is stopped
    (SIGTERM, then SIGKILL of its group) whatever happens, Ctrl-C included.
    """
    settings = settings or EvalSettings()
    hooks = hooks or ServerHooks()
    data = data or load_eval_data(manifest, settings)
    timings: dict[str, float] = {}
    began = time.perf_counter()
    server = ServerProcess(
        manifest,
        overrides=settings.overrides,
        port=manifest.port if settings.keep_port else None,
        log_path=settings.log_path,
        ready_timeout_s=settings.ready_timeout_s,
        launchers=shared_launchers() if settings.warm_start else None,
    )
    hooks.server_created(server)
    try:
        _notify(progress, "server")
        _timed(timings, "ready", _start_and_wait(server), hooks)
        result = measure_server(
            server.base_url,
            server.served_model_name,
            data,
            settings,
            warmup=settings.warmup or warmup_settings_from(manifest, settings.overrides),
            timings=timings,
            progress=progress,
            hooks=hooks,
        )
    finally:
        _notify(progress, "teardown")
        try:
            _timed(timings, "teardown", server.stop, hooks)
        finally:
            hooks.server_stopped(server)
    timings["total"] = time.perf_counter() - began
    return dataclasses.replace(
        result,
        manifest=manifest.name,
        overrides=dict(settings.overrides),
        timings=dict(timings),
        log_path=str(server.log_path),
    )


# what ``evaluate`` does, as a seam: a manifest and its settings in, its figures out (one fresh
# server a call); the ablation and the re-run take one, so that tests can stand in for the servers
Measure = Callable[[Manifest, EvalSettings], EvalResult]


def _start_and_wait(server: ServerProcess) -> Callable[[], float]:
    def start() -> float:
        server.start()
        return server.wait_ready()

    return start


def measure_server(
    base_url: str,
    model: str,
    data: EvalData,
    settings: EvalSettings,
    *,
    warmup: WarmupSettings | None = None,
    timings: dict[str, float] | None = None,
    progress: ProgressCallback | None = None,
    hooks: ServerHooks | None = None,
) -> EvalResult:
    """The measurement phases against a server that is already up (no start, no stop)."""
    timings = {} if timings is None else timings
    hooks = hooks or ServerHooks()
    skipped: list[str] = []
    served = served_models(base_url)
    if model not in served:
        raise MeasurementError(f"the server at {base_url} does not serve {model!r} (it serves {sorted(served)})")
    if data.ppl_records is not None and served[model]:
        check_ppl_records(data.ppl_records, max_model_len=served[model])

    # PPL first: it is not timed, so it needs no warm-up, and a trial stopped
    # early by the PPL gate then costs neither the warm-up nor the TPS run
    ppl = None
    ppl_records, ppl_settings = data.ppl_records, settings.ppl
    if ppl_settings is not None and ppl_records is not None:
        ppl = _timed(
            timings,
            "ppl",
            lambda: measure_ppl(base_url, model, ppl_records, ppl_settings, progress=progress),
            hooks,
        )
    gate_failed = ppl is not None and ppl.stopped_early and not settings.tps_after_failed_gate

    warm = None
    if gate_failed and data.reference is None and settings.save_reference is None:
        skipped.append("warmup: nothing timed follows a trial stopped by the PPL gate")
    else:
        warm = _timed(
            timings,
            "warmup",
            lambda: run_warmup(base_url, model, warmup or WarmupSettings(), progress=progress),
            hooks,
        )

    tps, screen = _measure_speed(
        base_url, model, data.prompts, settings, ppl if gate_failed else None, timings, hooks, progress, skipped
    )

    fidelity = None
    reference = data.reference
    if reference is not None:
        fidelity = _timed(
            timings,
            "fidelity",
            lambda: measure_fidelity(base_url, model, reference, progress=progress),
            hooks,
        )

    saved = _save_reference(base_url, model, data.prompts, settings, timings, hooks, progress)
    return EvalResult(
        manifest="",
        overrides={},
        model=model,
        warmup=warm,
        ppl=ppl,
        tps=tps,
        screen=screen,
        fidelity=fidelity,
        timings=dict(timings),
        skipped=tuple(skipped),
        reference_saved=saved,
    )


def _measure_speed(
    base_url: str,
    model: str,
    prompts: PromptSet | None,
    settings: EvalSettings,
    failed_gate: PplResult | None,
    timings: dict[str, float],
    hooks: ServerHooks,
    progress: ProgressCallback | None,
    skipped: list[str],
) -> tuple[TpsResult | None, TpsResult | None]:
    """The TPS run, and the screen before it: (tps, screen). ``failed_gate``: the PPL that
    stopped the trial early, when it did (no screen, no TPS run); a screen below the study's
    floor spares the TPS run too. Each phase left out is told in ``skipped``."""
    tps_settings, screen_settings = settings.tps, settings.screen
    if tps_settings is None or prompts is None:
        return None, None
    screen = None
    if screen_settings is not None and failed_gate is None:
        screen = _timed(
            timings,
            "screen",
            lambda: measure_tps(base_url, model, prompts, screen_settings, progress=progress),
            hooks,
        )
    floor = settings.screen_floor
    if failed_gate is not None:
        cap = settings.ppl.stop_above if settings.ppl is not None else None
        skipped.append(f"tps: PPL {failed_gate.ppl:.4f} is clearly over the cap {cap}")
    elif screen is not None and floor is not None and screen.tps is not None and screen.tps < floor:
        skipped.append(
            f"tps: the screen read {screen.tps:.2f} tok/s, below the floor {floor:.2f} (it cannot beat the study's best)"
        )
    else:
        tps = _timed(
            timings,
            "tps",
            lambda: measure_tps(base_url, model, prompts, tps_settings, progress=progress),
            hooks,
        )
        return tps, screen
    return None, screen


def _save_reference(
    base_url: str,
    model: str,
    prompts: PromptSet | None,
    settings: EvalSettings,
    timings: dict[str, float],
    hooks: ServerHooks,
    progress: ProgressCallback | None,
) -> str | None:
    """``save_reference``: this server's outputs saved as a fidelity reference; where (None: not asked)."""
    save_to = settings.save_reference
    if save_to is None or prompts is None:
        return None
    output_len = settings.tps.output_len if settings.tps else TpsSettings().output_len
    reference = _timed(
        timings,
        "reference",
        lambda: generate_reference(
            base_url,
            model,
            prompts.head(settings.reference_prompts),
            output_len=output_len,
            progress=progress,
        ),
        hooks,
    )
    return str(reference.save(save_to))


def _timed(timings: dict[str, float], phase: str, work: Callable[[], _Result], hooks: ServerHooks) -> _Result:
    began = time.perf_counter()
    try:
        return work()
    finally:
        timings[phase] = time.perf_counter() - began
        hooks.phase_ended(phase, timings[phase])


def _notify(progress: ProgressCallback | None, phase: str) -> None:
    if progress is not None:
        try:
            progress(phase, 0, 0)
        except Exception:  # noqa: BLE001 - display problems must not cost a measurement
            logger.exception("progress callback failed for phase %r", phase)
