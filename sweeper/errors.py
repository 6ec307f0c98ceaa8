"""The errors ``sweeper`` raises, and the roots the CLI catches.

``SweeperError`` is the root of sweeper's own errors. The lower packages
(``evaluators``, ``storage``, ``search_spaces``) import nothing of
``sweeper`` and raise from roots of their own (``EvaluatorError``,
``StorageError``, ``SearchSpaceError``); this module re-exports their
errors (``from sweeper.errors import MeasurementError`` is the same class)
and names the four roots in ``ERROR_ROOTS``: whatever catches every error
raised on purpose catches that tuple. Every error carries ``exit_code``: 2
for input the user fixes, else 1. The whole tree is drawn once, in
docs/architecture.md.

Callers react by group: a user-input error (``USER_INPUT_ERRORS``:
``UserInputError`` and the lower packages' ``DataError`` and
``SearchSpaceError``) is fixed by the user and never retried; a
``ServerError`` or ``MeasurementError`` fails one trial and the sweep goes
on; a ``StorageError`` or ``StudyError`` ends the command. Within the
trial-failing group, a ``ServerRefusedError`` is the one deterministic
answer: the same configuration is refused again, so it is not retried and
the study tells Optuna it is infeasible; the others are transient (retried
once at start, counted toward the consecutive-failure stop).

``ServerError`` and ``MeasurementError`` carry ``kind``: the failure kind as
``sweeper.serving.classify`` named it (``oom-start``, ``oom-measure``,
``crash``, ``timeout``, ``refused``, ``port``, ``environment``,
``stop-failed``, ``measurement``), or None where nobody classified it yet.
"""

from __future__ import annotations

from evaluators.errors import DataError, EvaluatorError, MeasurementError
from search_spaces.errors import SearchSpaceError
from storage.errors import StorageError

__all__ = [
    "ERROR_ROOTS",
    "USER_INPUT_ERRORS",
    "DataError",
    "EvaluatorError",
    "ManifestError",
    "MeasurementError",
    "SearchSpaceError",
    "ServerError",
    "ServerIdentityError",
    "ServerRefusedError",
    "ServerStartError",
    "ServerStopError",
    "ServerTimeoutError",
    "StorageError",
    "StudyError",
    "SweeperError",
    "TrialTimeoutError",
    "UserInputError",
]


class SweeperError(Exception):
    """Root of every error ``sweeper`` raises on purpose."""

    exit_code: int = 1


class UserInputError(SweeperError):
    """Input that the user has to fix; nothing was written."""

    exit_code = 2


class ManifestError(UserInputError):
    """A manifest file, or one of its fields, is not valid."""

    def __init__(self, source: str, field: str | None, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = f"{source}: field '{field}'" if field else source
        super().__init__(f"{where}: {problem}")


class ServerError(SweeperError):
    """The model server failed to start, answer or stop as expected."""

    def __init__(self, message: str, *, log_tail: str = "", kind: str | None = None) -> None:
        self.log_tail = log_tail
        self.kind = kind
        super().__init__(message)


class ServerStartError(ServerError):
    """The server process exited before it was ready."""


class ServerRefusedError(ServerStartError):
    """The server rejected its configuration at start-up (a validation error).

    Deterministic: the same settings are refused again, so the trial is not
    retried and counts as an infeasible configuration, not a failure.
    """


class ServerTimeoutError(ServerError):
    """The server was not ready before its deadline."""


class ServerIdentityError(ServerError):
    """The process answering on the port is not the one sweeper started."""


class ServerStopError(ServerError):
    """A process of the server (its group or its token) survived SIGKILL."""

    def __init__(self, message: str, *, pids: list[int], log_tail: str = "") -> None:
        self.pids = list(pids)
        super().__init__(message, log_tail=log_tail, kind="stop-failed")


class TrialTimeoutError(ServerError):
    """A trial ran past its wall-clock limit; its server was stopped."""

    def __init__(self, message: str, *, limit_s: float, log_tail: str = "") -> None:
        self.limit_s = limit_s
        super().__init__(message, log_tail=log_tail, kind="timeout")


class StudyError(SweeperError):
    """The study cannot go on, or has no answer to give."""


# the roots of the four packages' trees: catching them catches every error raised on purpose
# (each named, so that a caught error's ``exit_code`` is known to the type checker)
ERROR_ROOTS: tuple[type[SweeperError], type[EvaluatorError], type[StorageError], type[SearchSpaceError]] = (
    SweeperError,
    EvaluatorError,
    StorageError,
    SearchSpaceError,
)
# input the user fixes, never retried: sweeper's group and the lower packages' user errors
USER_INPUT_ERRORS: tuple[type[Exception], ...] = (UserInputError, DataError, SearchSpaceError)
