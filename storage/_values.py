"""Value conversions shared by our tables: UTC timestamps, JSON-safe numbers, words."""

from __future__ import annotations

import datetime
import enum
import math
from collections.abc import Mapping
from typing import Any, overload


class StoredWord(str, enum.Enum):
    """A decision stored, compared and printed as its word (``str(Control.OFF)`` is ``off``)."""

    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@overload
def as_utc(moment: datetime.datetime) -> datetime.datetime: ...
@overload
def as_utc(moment: datetime.datetime | None) -> datetime.datetime | None: ...
def as_utc(moment: datetime.datetime | None) -> datetime.datetime | None:
    """SQLite returns naive datetimes: they were written in UTC."""
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def json_safe(value: Any) -> Any:
    """JSON columns reject NaN/inf on some backends: store them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def finite_float(value: float | None) -> float | None:
    """Float columns take no NaN/inf on every backend: a non-finite value is stored as None."""
    return value if value is None or math.isfinite(value) else None
