"""What kind of failure ended a trial: the one place where that is decided.

``classify(log_tail, exc, during_start=..., server_exited=...)`` reads the
error and the server's log tail and returns a ``FailureKind``:

=================  ==========================================================
``oom-start``      out of memory while the server started (CUDA OOM, vLLM's
                   "Insufficient memory" / no room for the KV cache)
``oom-measure``    out of memory once it was serving
``crash``          the server exited (at start or while measuring), no
                   other cause recognised
``timeout``        a hang: not ready in time, a request that timed out, or a
                   trial past its wall-clock limit
``refused``        the server rejected its configuration at start-up
                   (vLLM's pydantic ``ValidationError``, a ``ValueError``
                   from its config checks, an argparse error)
``port``           the port was taken, or another process answered on it
``environment``    the serve command or a module it needs is missing
``stop-failed``    a process of the server survived SIGKILL
``measurement``    the server ran, but a measurement could not be completed
=================  ==========================================================

The kind decides how the study reacts (``FailureKind.retry_at_start``,
``counts_toward_stop``, ``infeasible``): a refusal is deterministic (not
retried, told to Optuna as an infeasible configuration); an out-of-memory
or crash at start is retried once in a fresh server.
"""

from __future__ import annotations

import enum
import logging
import re

from sweeper.errors import (
    MeasurementError,
    ServerError,
    ServerIdentityError,
    ServerRefusedError,
    ServerStopError,
    ServerTimeoutError,
    TrialTimeoutError,
)

logger = logging.getLogger(__name__)


class FailureKind(str, enum.Enum):
    OOM_START = "oom-start"
    OOM_MEASURE = "oom-measure"
    CRASH = "crash"
    TIMEOUT = "timeout"
    REFUSED = "refused"
    PORT = "port"
    ENVIRONMENT = "environment"
    STOP_FAILED = "stop-failed"
    MEASUREMENT = "measurement"

    @property
    def retry_at_start(self) -> bool:
        """A failed start of this kind is tried once more in a fresh server."""
        return self in (FailureKind.OOM_START, FailureKind.CRASH, FailureKind.PORT)

    @property
    def infeasible(self) -> bool:
        """The configuration itself is at fault: Optuna learns it as infeasible."""
        return self is FailureKind.REFUSED

    @property
    def counts_toward_stop(self) -> bool:
        """Counted toward ``max_consecutive_failures`` (a refusal is an answer, not a fault)."""
        return self is not FailureKind.REFUSED


# checked in this order: an OOM often surfaces as a ValueError, so it comes before refusals
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|Insufficient memory|"
    r"No available memory for the cache blocks|"
    r"larger than the available KV cache memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|std::bad_alloc|\bMemoryError\b",
    re.IGNORECASE,
)
_PORT = re.compile(r"Address already in use|\[Errno 98\]|address already in use")
_ENVIRONMENT = re.compile(
    r"ModuleNotFoundError: No module named|command not found|can't open file|"
    r"No such file or directory|No package metadata was found",
)
_REFUSED = re.compile(
    r"pydantic_core\._pydantic_core\.ValidationError|\bValidationError: \d+ validation error|"
    r"^\s*(?:\w+\.)*ValueError: |"
    r"error: (?:argument |unrecognized arguments|the following arguments are required)|"
    r"NotImplementedError: ",
    re.MULTILINE,
)


def classify(
    log_tail: str,
    exc: BaseException | None,
    *,
    during_start: bool,
    server_exited: bool = False,
) -> FailureKind:
    """The kind of a trial's failure, from the error and the server's log tail.

    ``during_start``: the server never became ready. ``server_exited``: its
    process was gone when the failure was seen (a measurement that failed
    because the server died is a crash, or an OOM, not a bad measurement).
    A kind already set on the error (``exc.kind``) wins.
    """
    preset = getattr(exc, "kind", None)
    if preset:
        return FailureKind(preset)
    if isinstance(exc, ServerStopError):
        return FailureKind.STOP_FAILED
    if isinstance(exc, (TrialTimeoutError, ServerTimeoutError)):
        return FailureKind.TIMEOUT
    if isinstance(exc, ServerIdentityError):
        return FailureKind.PORT
    if isinstance(exc, ServerRefusedError):
        return FailureKind.REFUSED
    message = str(exc) if exc is not None else ""
    log = log_tail or ""
    if _OOM.search(log) or _OOM.search(message):
        return FailureKind.OOM_START if during_start else FailureKind.OOM_MEASURE
    if isinstance(exc, OSError):
        return FailureKind.ENVIRONMENT
    if during_start:
        if _PORT.search(log) or "already in use" in message:
            return FailureKind.PORT
        if _REFUSED.search(log):
            return FailureKind.REFUSED
        if _ENVIRONMENT.search(log):
            return FailureKind.ENVIRONMENT
        return FailureKind.CRASH
    if server_exited:
        return FailureKind.CRASH
    if "timed out" in message:
        return FailureKind.TIMEOUT
    if isinstance(exc, ServerError):
        return FailureKind.CRASH
    return FailureKind.MEASUREMENT


def with_kind(exc: ServerError | MeasurementError, kind: FailureKind) -> ServerError | MeasurementError:
    """The same error, its ``kind`` set (a refusal at start becomes a ``ServerRefusedError``)."""
    if kind is FailureKind.REFUSED and not isinstance(exc, ServerRefusedError):
        refused = ServerRefusedError(
            f"the server refused its configuration: {_refusal_line(getattr(exc, 'log_tail', ''))} ({exc})",
            log_tail=getattr(exc, "log_tail", ""),
            kind=kind.value,
        )
        refused.__cause__ = exc
        return refused
    exc.kind = kind.value
    return exc


def _refusal_line(log_tail: str) -> str:
    """The validation error's own lines (pydantic puts the field and reason after it)."""
    lines = log_tail.splitlines()
    for index, line in enumerate(lines):
        if _REFUSED.search(line + "\n"):
            picked = [line.strip()] + [follow.strip() for follow in lines[index + 1 : index + 3] if follow.strip()]
            return " / ".join(picked)[:500]
    return "(no validation error line in the log tail)"
