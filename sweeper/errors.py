"""The one exception tree of sweeper.

The root and the errors that the lower packages (``evaluators``,
``storage``, ``search_spaces``) raise live in ``errortree``, which imports
nothing, so those packages raise from this tree without importing
``sweeper``; this module re-exports them (``from sweeper.errors import
MeasurementError`` is the same class) and adds the errors only ``sweeper``
raises. Marked (*): defined in ``errortree``::

    SweeperError (*)             root; the CLI turns it into one line + exit code
    ├── UserInputError (*)       bad input from the user: exit code 2
    │   ├── ManifestError        a manifest file or field is wrong
    │   ├── SearchSpaceError (*) a search-space file or parameter is wrong
    │   └── DataError (*)        a prompt set or PPL reference set is wrong
    ├── ServerError              the model server did not do its job
    │   ├── ServerStartError     it exited during start-up
    │   │   └── ServerRefusedError  it refused the configuration (deterministic)
    │   ├── ServerTimeoutError   it was not ready before the deadline
    │   ├── ServerIdentityError  something else answers on its port
    │   ├── ServerStopError      a process of it survived SIGKILL
    │   └── TrialTimeoutError    the trial ran past its wall-clock limit
    ├── MeasurementError (*)     a measurement could not be completed
    ├── StorageError (*)         the study database could not be used
    └── StudyError (*)           the study cannot go on or has no answer

Callers react by group: a ``UserInputError`` is fixed by the user and never
retried; a ``ServerError`` or ``MeasurementError`` fails one trial and the
sweep goes on; a ``StorageError`` or ``StudyError`` ends the command.
Within the trial-failing group, a ``ServerRefusedError`` is the one
deterministic answer: the same configuration is refused again, so it is not
retried and the study tells Optuna it is infeasible; the others are
transient (retried once at start, counted toward the consecutive-failure
stop).

``ServerError`` and ``MeasurementError`` carry ``kind``: the failure kind as
``sweeper.serving.classify`` named it (``oom-start``, ``oom-measure``,
``crash``, ``timeout``, ``refused``, ``port``, ``environment``,
``stop-failed``, ``measurement``), or None where nobody classified it yet.
"""

from __future__ import annotations

from errortree import (
    DataError,
    MeasurementError,
    SearchSpaceError,
    StorageError,
    StudyError,
    SweeperError,
    UserInputError,
)

__all__ = [
    "DataError",
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
