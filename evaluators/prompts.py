"""Prompt sets for the TPS benchmark: load, check, split, save.

The challenge's prompts are ShareGPT records (``{id, conversations: [{from,
value}, ...]}``); the benchmark sends the first human turn of each. Records
with a plain ``prompt`` (or ``text``) field are accepted too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from evaluators._common import TokenCounter
from evaluators._tables import load_rows, split_items
from evaluators.errors import DataError

logger = logging.getLogger(__name__)

HUMAN_ROLES = ("human", "user")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prompt:
    """One benchmark prompt: the text of the user turn, with the record's id."""

    id: str
    text: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromptSet:
    """An ordered, validated set of prompts and where it came from."""

    source: str
    prompts: tuple[Prompt, ...]

    def __len__(self) -> int:
        return len(self.prompts)

    def __iter__(self) -> Iterator[Prompt]:
        return iter(self.prompts)

    def __getitem__(self, index: int) -> Prompt:
        return self.prompts[index]

    def head(self, count: int) -> PromptSet:
        """The first ``count`` prompts (all of them if there are fewer)."""
        return dataclasses.replace(self, prompts=self.prompts[:count])

    def split(self, *, heldout_fraction: float = 0.5, seed: int = 0) -> tuple[PromptSet, PromptSet]:
        """(tuning, held-out): seeded, deterministic, by id (see ``split_items``)."""
        tuning, heldout = split_items(self.prompts, lambda p: p.id, heldout_fraction=heldout_fraction, seed=seed)
        return (
            PromptSet(source=f"{self.source} (tuning part)", prompts=tuple(tuning)),
            PromptSet(source=f"{self.source} (held-out part)", prompts=tuple(heldout)),
        )

    def to_sharegpt(self) -> list[dict[str, Any]]:
        """ShareGPT records, as the challenge's file and ``vllm bench serve`` read them."""
        return [
            {
                "id": p.id,
                "conversations": [
                    {"from": "human", "value": p.text},
                    {"from": "gpt", "value": ""},
                ],
            }
            for p in self.prompts
        ]

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write as a ShareGPT JSON list."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_sharegpt(), ensure_ascii=False, indent=1) + "\n")
        return path


def load_prompts(source: str | os.PathLike[str], *, split: str = "train", limit: int | None = None) -> PromptSet:
    """Load a prompt set from a local JSON/JSONL/Parquet file or a hub dataset id.

    Raises DataError naming the source, the record and the field when a
    record has no usable user turn, an empty one, or a duplicate id.
    """
    label = str(source)
    rows = load_rows(source, split=split)
    prompts = [_prompt_from_row(row, index, label) for index, row in enumerate(rows)]
    seen: dict[str, int] = {}
    for index, prompt in enumerate(prompts):
        if prompt.id in seen:
            raise DataError(f"{label}: record {index}: id {prompt.id!r} repeats record {seen[prompt.id]}")
        seen[prompt.id] = index
    if limit is not None:
        prompts = prompts[:limit]
    logger.info("loaded %d prompts from %s", len(prompts), label)
    return PromptSet(source=label, prompts=tuple(prompts))


def _prompt_from_row(row: dict[str, Any], index: int, label: str) -> Prompt:
    raw_id = row.get("id")
    record_id = str(raw_id) if raw_id not in (None, "") else str(index)
    where = f"{label}: record {index} (id {record_id!r})"
    if row.get("conversations") is not None:
        turns = row["conversations"]
        if not isinstance(turns, list) or not turns:
            raise DataError(f"{where}: field 'conversations' must be a non-empty list of turns")
        for turn_index, turn in enumerate(turns):
            if not isinstance(turn, dict):
                raise DataError(f"{where}: conversations[{turn_index}] is not an object")
            if turn.get("from") in HUMAN_ROLES or turn.get("role") in HUMAN_ROLES:
                key = "value" if turn.get("value") is not None else "content"
                text = turn.get(key)
                field = f"conversations[{turn_index}].{key}"
                break
        else:
            raise DataError(f"{where}: field 'conversations' has no human turn")
    elif row.get("prompt") is not None or row.get("text") is not None:
        field = "prompt" if row.get("prompt") is not None else "text"
        text = row[field]
    else:
        raise DataError(
            f"{where}: needs a field 'conversations' (ShareGPT) or 'prompt'; "
            f"it has {sorted(k for k, v in row.items() if v is not None)}"
        )
    if not isinstance(text, str):
        raise DataError(f"{where}: field '{field}' must be a string, not {type(text).__name__}")
    if not text.strip():
        raise DataError(f"{where}: field '{field}' is empty")
    return Prompt(id=record_id, text=text)


def check_prompt_lengths(
    prompts: Sequence[Prompt] | PromptSet,
    *,
    count_tokens: TokenCounter,
    output_len: int,
    max_model_len: int,
    source: str = "prompts",
) -> int:
    """Raise DataError if a prompt plus ``output_len`` does not fit in ``max_model_len``.

    ``count_tokens`` returns the prompt's length as the server will see it
    (through the chat template). Returns the longest prompt's length.
    """
    if isinstance(prompts, PromptSet):
        source = prompts.source
    longest = 0
    for index, prompt in enumerate(prompts):
        length = count_tokens(prompt.text)
        longest = max(longest, length)
        if length + output_len > max_model_len:
            raise DataError(
                f"{source}: record {index} (id {prompt.id!r}) has {length} prompt tokens; with "
                f"{output_len} output tokens that exceeds the server's max_model_len "
                f"{max_model_len}"
            )
    return longest
