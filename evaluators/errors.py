"""The errors ``evaluators`` raises, under its own root.

``EvaluatorError`` is the root; nothing here knows ``sweeper``, whose CLI
catches this root beside its own (``sweeper.errors.ERROR_ROOTS``) and turns
each error into one line and its ``exit_code``. The tree of every package is
drawn once, in docs/architecture.md.
"""

from __future__ import annotations

__all__ = ["DataError", "EvaluatorError", "MeasurementError"]


class EvaluatorError(Exception):
    """Root of every error ``evaluators`` raises on purpose."""

    exit_code: int = 1


class DataError(EvaluatorError):
    """A prompt set or PPL reference set is not valid: input the user fixes (exit code 2)."""

    exit_code = 2


class MeasurementError(EvaluatorError):
    """A measurement (TPS, PPL, fidelity) could not be completed."""

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        self.kind = kind
        super().__init__(message)
