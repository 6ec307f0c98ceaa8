"""Reading rows of a data set with the HF ``datasets`` library, and the seeded split.

A source is a local ``.json`` (a list of objects), ``.jsonl`` or ``.parquet``
file, or a hub dataset id (``owner/name``, optionally ``owner/name:split``).
Rows come back as plain dicts in file order. A local JSON file that the
JSON file is read with the standard library first, so that an error names
the line or record at fault before the library writes anything to its cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from evaluators.errors import DataError

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def load_rows(source: str | os.PathLike[str], *, split: str = "train") -> list[dict[str, Any]]:
    """All rows of ``source`` as dicts; DataError naming the source if it cannot be read."""
    label = str(source)
    path = Path(source).expanduser()
    if path.exists():
        if path.is_dir():
            raise DataError(f"{label}: is a folder; give a .json, .jsonl or .parquet file")
        builder = BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataError(f"{label}: unknown file type {path.suffix!r}; use .json, .jsonl or .parquet")
        if path.stat().st_size == 0:
            raise DataError(f"{label}: the file is empty")
        problem = _stdlib_diagnosis(str(path)) if builder == "json" else None
        if problem:  # found before the library runs: no output of its own, nothing in its cache
            raise DataError(f"{label}: {problem}")
        rows = _load_with_datasets(builder, label, data_files=str(path.resolve()), split="train")
    elif _looks_like_hub_id(label):
        name, _, hub_split = label.partition(":")
        rows = _load_with_datasets(name, label, split=hub_split or split)
    else:
        raise DataError(f"{label}: no such file (and not a hub dataset id like 'owner/name')")
    if not rows:
        raise DataError(f"{label}: holds no records")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{label}: record {index} is {type(row).__name__}, not an object")
    return rows


def _looks_like_hub_id(label: str) -> bool:
    name = label.partition(":")[0]
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not label.startswith((".", "/", "~"))


def _load_with_datasets(path: str, label: str, **kwargs: Any) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DataError(f"{label}: the 'datasets' library is not installed") from exc
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        table = datasets.load_dataset(path, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the library raises many kinds; all mean "cannot read"
        detail = _stdlib_diagnosis(label) if Path(label).exists() else None
        cause = exc.__cause__ or exc
        message = detail or f"cannot be read as a data set ({type(cause).__name__}: {cause})"
        raise DataError(f"{label}: {message}") from exc
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
    if isinstance(table, dict):  # a DatasetDict: no split was chosen
        raise DataError(f"{label}: choose a split, e.g. '{label}:train'")
    return table.to_list()


def _stdlib_diagnosis(label: str) -> str | None:
    """Why a local JSON/JSONL file does not parse, naming the line, or None."""
    path = Path(label)
    try:
        return _json_diagnosis(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"


def _json_diagnosis(path: Path) -> str | None:
    if path.suffix.lower() == ".jsonl":
        with path.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    json.loads(line)
                except json.JSONDecodeError as exc:
                    return f"line {number} is not valid JSON ({exc.msg})"
        return None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            return f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        if not isinstance(data, list):
            return f"must hold a JSON list of records, not {type(data).__name__}"
        for index, row in enumerate(data):
            if not isinstance(row, dict):
                return f"record {index} is {type(row).__name__}, not an object"
    return None


def split_items(
    items: Sequence[T],
    key: Callable[[T], str],
    *,
    heldout_fraction: float,
    seed: int,
) -> tuple[list[T], list[T]]:
    """Split into (tuning, held-out), seeded and deterministic, keeping each part in order.

    An item goes to the held-out part when the hash of ``seed`` and its key is
    among the lowest ``round(n * heldout_fraction)``: the split depends only
    on the keys and the seed, not on the order of the file, so a prompt set
    and a PPL set that share ids are split the same way.
    """
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ValueError(f"heldout_fraction must be within [0, 1], not {heldout_fraction}")
    keys = [key(item) for item in items]
    if len(set(keys)) != len(keys):
        raise DataError("cannot split: the ids are not unique")
    count = round(len(items) * heldout_fraction)
    ranked = sorted(keys, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    heldout_keys = set(ranked[:count])
    tuning = [item for item, k in zip(items, keys, strict=True) if k not in heldout_keys]
    heldout = [item for item, k in zip(items, keys, strict=True) if k in heldout_keys]
    return tuning, heldout
