"""The root of sweeper's one exception tree, and the errors every package raises.

``evaluators``, ``storage`` and ``search_spaces`` raise these without
importing anything of ``sweeper``; ``sweeper.errors`` re-exports them and
hangs the errors only ``sweeper`` raises (manifests, the model server) on
the same root, so the CLI catches one tree. This package imports nothing::

    SweeperError                 root; the CLI turns it into one line + exit code
    ├── UserInputError           bad input from the user: exit code 2
    │   ├── SearchSpaceError     a search-space file or parameter is wrong
    │   └── DataError            a prompt set or PPL reference set is wrong
    ├── MeasurementError         a measurement could not be completed
    ├── StorageError             the study database could not be used
    └── StudyError               the study cannot go on or has no answer

The whole tree, with the reaction each group gets, is drawn in
``sweeper.errors``.
"""

from __future__ import annotations

__all__ = [
    "DataError",
    "MeasurementError",
    "SearchSpaceError",
    "StorageError",
    "StudyError",
    "SweeperError",
    "UserInputError",
]


class SweeperError(Exception):
    """Root of every error sweeper raises on purpose."""

    exit_code: int = 1


class UserInputError(SweeperError):
    """Input that the user has to fix; nothing was written."""

    exit_code = 2


class SearchSpaceError(UserInputError):
    """A search-space file, or one of its parameters, is not valid."""


class DataError(UserInputError):
    """A prompt set or PPL reference set is not valid."""


class MeasurementError(SweeperError):
    """A measurement (TPS, PPL, fidelity) could not be completed."""

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        self.kind = kind
        super().__init__(message)


class StorageError(SweeperError):
    """The study database could not be opened, read or written."""


class StudyError(SweeperError):
    """The study cannot go on, or has no answer to give."""
