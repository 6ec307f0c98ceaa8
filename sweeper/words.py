"""The base of sweeper's decisions: a str enum stored, compared and printed as its word.

The study's race outcomes and claims (``sweeper.study``) and the ablation's
verdicts (``sweeper.ablation``) derive from ``Word``; both stand above this
module, which imports nothing of ``sweeper``. The lower packages keep their
own (``storage.Control``, ``evaluators.PriorFit``): they import nothing of
``sweeper``.
"""

from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """A decision stored, compared and printed as its word (``str(Claim.FASTER)`` is ``faster``)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)
