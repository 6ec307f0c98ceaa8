"""The errors ``storage`` raises, under its own root.

``StorageError`` is the root; nothing here knows ``sweeper``, whose CLI
catches this root beside its own (``sweeper.errors.ERROR_ROOTS``) and turns
each error into one line and its ``exit_code``. The tree of every package is
drawn once, in docs/architecture.md.
"""

from __future__ import annotations

__all__ = ["StorageError", "StorageUrlError", "StudyNotFoundError"]


class StorageError(Exception):
    """The study database could not be opened, read or written."""

    exit_code: int = 1


class StorageUrlError(StorageError):
    """A --storage value that is not a database URL: input the user fixes (exit code 2)."""

    exit_code = 2


class StudyNotFoundError(StorageError):
    """No study database at the given storage, or no such study in it: input the user fixes (exit code 2)."""

    exit_code = 2
