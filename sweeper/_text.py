"""The small text forms every layer of sweeper prints alike: a ratio as a signed change in percent,
a confidence level in percent. The study, the answer, the reports and the CLI import them from
here; this module imports nothing of ``sweeper``."""

from __future__ import annotations


def percent_text(ratio: float) -> str:
    """A ratio as a signed change in percent: ``1.182`` is ``+18.2 %``."""
    return f"{(ratio - 1.0) * 100.0:+.1f} %"


def level_text(confidence: float) -> str:
    """A confidence level in percent: whole where it is whole (``95 %``), else to 2 decimals."""
    percent = confidence * 100
    return f"{percent:.0f} %" if abs(percent - round(percent)) < 1e-9 else f"{percent:.2f} %"
