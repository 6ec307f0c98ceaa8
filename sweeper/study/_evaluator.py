"""The seam between the study and whatever measures a configuration.

``run_study`` calls its ``Evaluator`` as ``evaluator(params, context)`` once
per trial and expects a ``Measurement`` back. The ``TrialContext`` gives it
what the study knows (trial number, the env overrides for the base
manifest, the PPL cap in force, a PPL already measured for the same
outputs) and takes what the study should keep while the trial is still
running (phase timings, the server token that lets a later run stop a
server left behind, the rendered manifest, the log tail).
``sweeper.measure.ServerEvaluator`` is the real one; tests and benchmarks
plug in their own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from storage import TrialStore
from sweeper.errors import MeasurementError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """What one trial measured.

    ``ppl=math.inf`` is a measured gate failure (a token with zero probability).
    ``ppl=None`` means "not measured": allowed when the context offered a
    ``known_ppl`` (reuse where only speed knobs changed). ``tps=None`` is
    allowed only with ``early_stopped=True`` (stopped because the PPL was
    already over the cap) or ``screened=True`` (a short TPS screen, in
    ``extras["tps_screen"]``, read below the context's ``screen_floor``, so
    the full measurement was skipped). ``phases`` maps phase name to seconds, in order;
    ``requests`` holds one mapping per request (a ``kind`` key groups them).
    """

    tps: float | None
    ppl: float | None
    early_stopped: bool = False
    screened: bool = False
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    requests: Sequence[Mapping[str, Any]] = ()
    manifest: Mapping[str, Any] | None = None
    log_tail: str = ""
    server_token: str | None = None
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("tps", "ppl"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise MeasurementError(f"measurement field {name!r} must be a number, not {value!r}")
            # an infinite PPL (a -inf logprob) is a measured gate failure, not an error
            finite = math.isfinite(value) or (name == "ppl" and value == math.inf)
            if not finite or value < 0 or (name == "ppl" and value == 0):
                raise MeasurementError(f"measurement field {name!r} is not a valid value: {value!r}")
        if self.tps is None and not (self.early_stopped or self.screened):
            raise MeasurementError("measurement has no 'tps' (only an early-stopped or screened-out trial may omit it)")
        if self.screened and not isinstance(self.extras.get("tps_screen"), (int, float)):
            raise MeasurementError("a screened-out measurement needs its figure in extras['tps_screen']")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialEvent:
    """Told to the progress callback: a trial started, entered a phase, or finished."""

    kind: str  # started | phase | progress | finished
    study_name: str
    number: int
    params: Mapping[str, Any]
    role: str = "sampled"
    phase: str | None = None
    done: int | None = None  # phase / progress: units of work done of total
    total: int | None = None
    state: str | None = None  # complete | failed | interrupted (finished only)
    tps: float | None = None
    ppl: float | None = None
    feasible: bool | None = None
    error: str | None = None
    best_number: int | None = None  # the incumbent (the confirmed best) and its estimate
    best_tps: float | None = None
    claim: str | None = None  # finished only: the study's claim, as Standing.describe says it
    elapsed_s: float = 0.0


class EvaluationContext(Protocol):
    """What an evaluator reads and writes while it measures one configuration.

    ``TrialContext`` is the study's (it stores what it is told at once);
    verification hands evaluators a context of its own with the same surface.
    """

    study_name: str
    number: int
    params: Mapping[str, Any]
    overrides: Mapping[str, str]
    role: str
    ppl_cap: float | None
    known_ppl: float | None
    known_ppl_trial: int | None
    log_tail: str

    @property
    def stop_requested(self) -> bool: ...

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    def record_phase(self, name: str, seconds: float) -> None: ...

    def notify_phase(self, name: str, done: int | None = None, total: int | None = None) -> None: ...

    def notify_progress(self, name: str, done: int, total: int) -> None: ...

    def set_server_token(self, token: str) -> None: ...

    def set_manifest(self, manifest: Mapping[str, Any]) -> None: ...

    def set_log_tail(self, text: str) -> None: ...

    def set_device(self, device: Mapping[str, str]) -> None: ...


class TimedPhases:
    """``phase(name)`` of the context protocol, over the class's ``notify_phase`` and ``record_phase``."""

    def notify_phase(self, name: str, done: int | None = None, total: int | None = None) -> None:
        raise NotImplementedError

    def record_phase(self, name: str, seconds: float) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase (``with context.phase("start"): ...``); kept even if it raises."""
        self.notify_phase(name)
        start = time.monotonic()
        try:
            yield
        finally:
            self.record_phase(name, time.monotonic() - start)


class TrialContext(TimedPhases):
    """Handed to ``evaluator(params, context)``; one per trial.

    Read: ``number``, ``study_name``, ``params``, ``overrides`` (env
    overrides for the base manifest), ``role`` ("baseline", an enqueued
    config's name, "sampled" or "retry of #N"), ``ppl_cap`` (None while a
    relative cap waits for the baseline), ``known_ppl`` / ``known_ppl_trial``
    (set when PPL reuse is allowed and these outputs were measured before),
    ``stop_requested`` (Ctrl-C/SIGTERM arrived: finish or give up quickly),
    ``screen_floor`` (None: no screen; else an evaluator with a short TPS
    screen runs it and skips the full run when it reads below the floor).

    Write (stored at once, so they survive a crash): ``phase(name)`` or
    ``record_phase``, ``set_server_token``, ``set_manifest``, ``set_log_tail``,
    ``set_device`` (the GPUs the server runs on, in the trial's extras).
    Display only: ``notify_phase(name, done, total)``, ``notify_progress``.
    """

    def __init__(
        self,
        *,
        study_name: str,
        number: int,
        params: Mapping[str, Any],
        overrides: Mapping[str, str],
        role: str,
        ppl_cap: float | None,
        known_ppl: float | None,
        known_ppl_trial: int | None,
        store: TrialStore,
        stop_event: threading.Event,
        on_phase: Callable[[str, int | None, int | None], None] | None = None,
        on_progress: Callable[[str, int, int], None] | None = None,
        screen_floor: float | None = None,
    ) -> None:
        self.study_name = study_name
        self.screen_floor = screen_floor
        self.number = number
        self.params: Mapping[str, Any] = dict(params)
        self.overrides: Mapping[str, str] = dict(overrides)
        self.role = role
        self.ppl_cap = ppl_cap
        self.known_ppl = known_ppl
        self.known_ppl_trial = known_ppl_trial
        self._store = store
        self._stop_event = stop_event
        self._on_phase = on_phase
        self._on_progress = on_progress
        self.recorded_phases: list[tuple[str, float]] = []
        self.server_token: str | None = None
        self.manifest: Mapping[str, Any] | None = None
        self.log_tail: str = ""

    @property
    def stop_requested(self) -> bool:
        return self._stop_event.is_set()

    def record_phase(self, name: str, seconds: float) -> None:
        """Store a phase's duration now (a crash later keeps it)."""
        self.recorded_phases.append((name, float(seconds)))
        self._store.add_phase(self.study_name, self.number, name, float(seconds))

    def notify_phase(self, name: str, done: int | None = None, total: int | None = None) -> None:
        """Tell the progress display that a phase began (not stored)."""
        if self._on_phase is not None:
            self._on_phase(name, done, total)

    def notify_progress(self, name: str, done: int, total: int) -> None:
        """Tell the progress display how far the phase is (not stored)."""
        if self._on_progress is not None:
            self._on_progress(name, done, total)

    def set_server_token(self, token: str) -> None:
        """The value of SWEEPER_SERVER_TOKEN in the server's environment (to stop it later)."""
        self.server_token = token
        self._store.update_running(self.study_name, self.number, server_token=token)

    def set_manifest(self, manifest: Mapping[str, Any]) -> None:
        self.manifest = dict(manifest)
        self._store.update_running(self.study_name, self.number, manifest=self.manifest)

    def set_log_tail(self, text: str) -> None:
        self.log_tail = text
        self._store.update_running(self.study_name, self.number, log_tail=text)

    def set_device(self, device: Mapping[str, str]) -> None:
        """The GPUs (and cores) this trial's server runs on, shown by ``sweeper status``."""
        self._store.update_running(self.study_name, self.number, extras={"device": dict(device)})


@runtime_checkable
class Evaluator(Protocol):
    """Measures one configuration: ``evaluator(params, context) -> Measurement``.

    ``params`` are the trial's parameter values; ``context.overrides`` the env
    overrides they mean for the base manifest. Raise ``ServerError`` or
    ``MeasurementError`` for a trial that failed (it is recorded and the
    study goes on); any other exception is a bug and ends the study once
    the trial is recorded.
    """

    def __call__(self, params: Mapping[str, Any], context: EvaluationContext) -> Measurement: ...
