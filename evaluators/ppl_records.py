"""PPL reference sets: load, check against the model, split, save.

The challenge scorer accepts two record shapes (JSONL, one object a line)::

    {"id", "context_token_ids": [...], "target_token_ids": [...]}
    {"id", "prompt_token_ids": [...], "score_token_start": S[, "score_token_end": E]}

Both become a ``PplRecord``: the token ids sent as the prompt and the
half-open range ``[score_start, score_end)`` of positions whose logprobs are
scored. Position 0 has no logprob, so ``score_start`` is at least 1.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from evaluators._tables import load_rows, split_items
from evaluators.errors import DataError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplRecord:
    """One scored sequence: ``token_ids`` is sent whole; ``[score_start, score_end)`` is scored."""

    id: str
    token_ids: tuple[int, ...]
    score_start: int
    score_end: int

    @property
    def scored_tokens(self) -> int:
        return self.score_end - self.score_start

    @property
    def context_tokens(self) -> int:
        return self.score_start

    def to_json_dict(self) -> dict[str, Any]:
        """The challenge's context/target shape when it fits, else the prompt/score shape."""
        if self.score_end == len(self.token_ids):
            return {
                "id": self.id,
                "context_token_ids": list(self.token_ids[: self.score_start]),
                "target_token_ids": list(self.token_ids[self.score_start :]),
            }
        return {
            "id": self.id,
            "prompt_token_ids": list(self.token_ids),
            "score_token_start": self.score_start,
            "score_token_end": self.score_end,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplRecordSet:
    """An ordered, validated PPL reference set and where it came from."""

    source: str
    records: tuple[PplRecord, ...]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[PplRecord]:
        return iter(self.records)

    def __getitem__(self, index: int) -> PplRecord:
        return self.records[index]

    @property
    def scored_tokens(self) -> int:
        return sum(r.scored_tokens for r in self.records)

    @property
    def context_tokens(self) -> int:
        return sum(r.context_tokens for r in self.records)

    @property
    def longest(self) -> int:
        return max((len(r.token_ids) for r in self.records), default=0)

    def head(self, count: int) -> PplRecordSet:
        return dataclasses.replace(self, records=self.records[:count])

    def split(self, *, heldout_fraction: float = 0.5, seed: int = 0) -> tuple[PplRecordSet, PplRecordSet]:
        """(tuning, held-out): seeded, deterministic, by id (see ``split_items``)."""
        tuning, heldout = split_items(self.records, lambda r: r.id, heldout_fraction=heldout_fraction, seed=seed)
        return (
            PplRecordSet(source=f"{self.source} (tuning part)", records=tuple(tuning)),
            PplRecordSet(source=f"{self.source} (held-out part)", records=tuple(heldout)),
        )

    def summary(self) -> dict[str, int]:
        return {
            "records": len(self.records),
            "context_tokens": self.context_tokens,
            "scored_tokens": self.scored_tokens,
            "longest": self.longest,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write as JSONL, one record a line, in the challenge's shape."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for record in self.records:
                out.write(json.dumps(record.to_json_dict()) + "\n")
        return path


def load_ppl_records(source: str | os.PathLike[str], *, split: str = "train", limit: int | None = None) -> PplRecordSet:
    """Load a PPL reference set from a local JSON/JSONL/Parquet file or a hub dataset id.

    Raises DataError naming the source, the record and the field for a
    wrong shape, an empty or out-of-range score span, negative token ids or
    a duplicate id.
    """
    label = str(source)
    rows = load_rows(source, split=split)
    records = [_record_from_row(row, index, label) for index, row in enumerate(rows)]
    seen: dict[str, int] = {}
    for index, record in enumerate(records):
        if record.id in seen:
            raise DataError(f"{label}: record {index}: id {record.id!r} repeats record {seen[record.id]}")
        seen[record.id] = index
    if limit is not None:
        records = records[:limit]
    result = PplRecordSet(source=label, records=tuple(records))
    logger.info("loaded PPL set %s: %s", label, result.summary())
    return result


def _record_from_row(row: dict[str, Any], index: int, label: str) -> PplRecord:
    raw_id = row.get("id")
    record_id = str(raw_id) if raw_id not in (None, "") else str(index)
    where = f"{label}: record {index} (id {record_id!r})"
    has_pair = row.get("context_token_ids") is not None or row.get("target_token_ids") is not None
    has_prompt = row.get("prompt_token_ids") is not None
    if has_pair and has_prompt:
        raise DataError(
            f"{where}: has both 'context_token_ids'/'target_token_ids' and 'prompt_token_ids'; use one shape"
        )
    if has_pair:
        context = _int_list(row, "context_token_ids", where)
        target = _int_list(row, "target_token_ids", where)
        if not context:
            raise DataError(f"{where}: field 'context_token_ids' is empty (the first token cannot be scored)")
        if not target:
            raise DataError(f"{where}: field 'target_token_ids' is empty")
        tokens = context + target
        start, end = len(context), len(tokens)
    elif has_prompt:
        tokens = _int_list(row, "prompt_token_ids", where)
        start = _integer(row, "score_token_start", where, required=True)
        end_raw = _integer(row, "score_token_end", where, required=False)
        end = len(tokens) if end_raw is None else end_raw
        if not 1 <= start < len(tokens):
            raise DataError(
                f"{where}: field 'score_token_start' is {start}; it must be from 1 to "
                f"{len(tokens) - 1} (the prompt has {len(tokens)} tokens; position 0 has "
                "no logprob)"
            )
        if not start < end <= len(tokens):
            raise DataError(
                f"{where}: field 'score_token_end' is {end}; it must be above score_token_start "
                f"({start}) and at most the prompt length ({len(tokens)})"
            )
    else:
        raise DataError(
            f"{where}: needs 'context_token_ids' + 'target_token_ids' or 'prompt_token_ids' + "
            f"'score_token_start'; it has {sorted(k for k, v in row.items() if v is not None)}"
        )
    negative = next((i for i, t in enumerate(tokens) if t < 0), None)
    if negative is not None:
        raise DataError(f"{where}: token id {tokens[negative]} at position {negative} is negative")
    return PplRecord(id=record_id, token_ids=tuple(tokens), score_start=start, score_end=end)


def _int_list(row: dict[str, Any], field: str, where: str) -> list[int]:
    """The field as token ids. Integral floats are taken as ints: the table reader turns a
    whole column into floats when one record holds a float, and that record is the one named."""
    value = row.get(field)
    if value is None:
        raise DataError(f"{where}: field '{field}' is missing")
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise DataError(f"{where}: field '{field}' must be a list of integer token ids, not {type(value).__name__}")
    tokens = []
    for item in value:
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int):
            raise DataError(
                f"{where}: field '{field}' must be a list of integer token ids, not a list holding {item!r}"
            )
        tokens.append(item)
    return tokens


@overload
def _integer(row: dict[str, Any], field: str, where: str, *, required: Literal[True]) -> int: ...
@overload
def _integer(row: dict[str, Any], field: str, where: str, *, required: bool) -> int | None: ...
def _integer(row: dict[str, Any], field: str, where: str, *, required: bool) -> int | None:
    value = row.get(field)
    if value is None:
        if required:
            raise DataError(f"{where}: field '{field}' is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(f"{where}: field '{field}' must be an integer, not {value!r}")
    return value


def check_ppl_records(
    records: Sequence[PplRecord] | PplRecordSet,
    *,
    vocab_size: int | None = None,
    max_model_len: int | None = None,
    source: str = "PPL records",
) -> None:
    """Raise DataError if a record does not fit the model: a token id outside the
    vocabulary, or a sequence the server cannot take with ``max_tokens: 1``."""
    if isinstance(records, PplRecordSet):
        source = records.source
    for index, record in enumerate(records):
        where = f"{source}: record {index} (id {record.id!r})"
        if vocab_size is not None:
            for position, token in enumerate(record.token_ids):
                if token >= vocab_size:
                    raise DataError(
                        f"{where}: token id {token} at position {position} is outside the "
                        f"model's vocabulary (size {vocab_size})"
                    )
        if max_model_len is not None and len(record.token_ids) + 1 > max_model_len:
            raise DataError(
                f"{where}: {len(record.token_ids)} tokens do not fit the server's max_model_len "
                f"{max_model_len} (the request needs the sequence plus 1 generated token)"
            )
