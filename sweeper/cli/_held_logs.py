"""Log lines held back while a command checks its input, so that a bad input is one line.

A command logs as it goes (the demo's choice, the data sets loaded). While
its input is still being checked, those lines are held (``holding``) and
shown once every check passed (``replay``, through the handlers in force
then); when a check fails with a user error (exit code 2), that error is the
only line the user sees. Any other error shows the held lines first, since
they may tell what led to it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# an error with this exit code is input the user fixes (UserInputError and its kin in the lower packages)
USER_ERROR_EXIT_CODE = 2


class HeldLogs(logging.Handler):
    """Log records held back by ``holding()``, shown by the root logger's handlers on ``replay()``."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @contextlib.contextmanager
    def holding(self) -> Iterator[HeldLogs]:
        """The root logger's records come here instead of its handlers, for the block."""
        root = logging.getLogger()
        handlers = list(root.handlers)
        root.handlers = [self]
        try:
            yield self
        except BaseException as exc:
            root.handlers = handlers
            if getattr(exc, "exit_code", None) != USER_ERROR_EXIT_CODE:
                self.replay()
            raise
        finally:
            root.handlers = handlers

    def replay(self) -> None:
        """The held records, in order, through the root logger's handlers in force now."""
        records, self.records = self.records, []
        for record in records:
            for handler in logging.getLogger().handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)


@contextlib.contextmanager
def logs_after_checks() -> Iterator[None]:
    """Hold the block's log lines; show them when it ends, unless a user error ends it."""
    held = HeldLogs()
    with held.holding():
        yield
    held.replay()
