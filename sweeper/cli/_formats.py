"""The small formats every view of the CLI shares: a figure or ``-``, params as ``k=v`` (a ratio
as a signed percent: ``sweeper._text.percent_text``, shared with the layers below)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def number_text(value: float | None, digits: int) -> str:
    """``2.15`` at ``digits`` decimals; ``-`` for none, ``inf`` for an infinite figure."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def params_text(params: Mapping[str, Any]) -> str:
    """``sliding_window=188, num_speculative_tokens=2``."""
    return ", ".join(f"{key}={value}" for key, value in dict(params).items())
