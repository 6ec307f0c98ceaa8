"""The errors ``search_spaces`` raises, under its own root.

``SearchSpaceError`` is the root, and every error of it is input the user
fixes (exit code 2); nothing here knows ``sweeper``, whose CLI catches this
root beside its own (``sweeper.errors.ERROR_ROOTS``). The tree of every
package is drawn once, in docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BaseValueError", "SearchSpaceError"]


class SearchSpaceError(Exception):
    """A search-space file, or one of its parameters, is not valid: input the user fixes (exit code 2)."""

    exit_code: int = 2


class BaseValueError(SearchSpaceError):
    """A base manifest's value that a parameter reads is not of the parameter's type.

    ``field``: where the value sits in the manifest's env (``SLIDING_WINDOW``,
    ``SPECULATIVE_CONFIG.num_speculative_tokens``); ``problem``: what is wrong
    with it, in words that need no other context.
    """

    def __init__(self, *, source: str, parameter: str, field: str, value: Any, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = f"{value!r} {problem} (the searched parameter {parameter!r} reads it)"
        super().__init__(f"{source}: parameter {parameter!r} reads {field}={value!r}, which {problem}")
