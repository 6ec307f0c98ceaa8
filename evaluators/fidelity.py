"""Greedy fidelity: does a trial generate exactly the tokens a baseline generated?

A baseline run records, for a few prompts, the greedy token ids the server
returns (``return_token_ids``) in a ``FidelityReference`` file. A trial
generates for the same prompts and the same length; the result is the
fraction of identical sequences and, for each one that differs, the first
position where it does. Settings that should not change the output (the
speculative-token count, the drafter's centroid top-k) must keep 100 %.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from evaluators._common import (
    DEFAULT_TIMEOUT_S,
    ProgressCallback,
    chat_payload,
    is_int_list,
    make_client,
    post_json,
    report,
)
from evaluators.errors import DataError, MeasurementError
from evaluators.prompts import Prompt, PromptSet

logger = logging.getLogger(__name__)

FORMAT = "sweeper-fidelity-reference/1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReferenceEntry:
    id: str
    prompt: str
    token_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FidelityReference:
    """A baseline server's greedy token ids for some prompts (the prompts are included)."""

    output_len: int
    entries: tuple[ReferenceEntry, ...]
    model: str = ""
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "output_len": self.output_len,
            "entries": [{"id": e.id, "prompt": e.prompt, "token_ids": list(e.token_ids)} for e in self.entries],
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict()) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FidelityReference:
        """Read a reference file; DataError naming the file, entry and field if it is wrong."""
        label = str(path)
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{label}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{label}: cannot be read ({exc})") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"{label}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DataError(f"{label}: not a fidelity reference (field 'format' must be {FORMAT!r})")
        entries = data.get("entries")
        if not isinstance(entries, list) or not entries:
            raise DataError(f"{label}: field 'entries' must be a non-empty list")
        parsed = []
        for index, entry in enumerate(entries):
            where = f"{label}: entry {index}"
            if not isinstance(entry, dict):
                raise DataError(f"{where} is not an object")
            if not isinstance(entry.get("prompt"), str) or not entry["prompt"]:
                raise DataError(f"{where}: field 'prompt' must be a non-empty string")
            if not is_int_list(entry.get("token_ids")) or not entry["token_ids"]:
                raise DataError(f"{where}: field 'token_ids' must be a non-empty list of integers")
            parsed.append(
                ReferenceEntry(
                    id=str(entry.get("id", index)),
                    prompt=entry["prompt"],
                    token_ids=tuple(entry["token_ids"]),
                )
            )
        output_len = data.get("output_len")
        if not isinstance(output_len, int) or output_len < 1:
            raise DataError(f"{label}: field 'output_len' must be a positive integer")
        return cls(
            output_len=output_len,
            entries=tuple(parsed),
            model=str(data.get("model", "")),
            source=label,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Divergence:
    """Where a trial's sequence first differs from the reference (``actual`` None: it ended)."""

    id: str
    position: int
    expected: int | None
    actual: int | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FidelityResult:
    compared: int
    identical: int
    divergences: tuple[Divergence, ...]
    duration_s: float

    @property
    def fraction_identical(self) -> float:
        return self.identical / self.compared if self.compared else 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FidelityResult:
        """The result ``to_dict`` wrote (its derived ``fraction_identical`` is recomputed)."""
        return cls(
            compared=int(data["compared"]),
            identical=int(data["identical"]),
            divergences=tuple(Divergence(**d) for d in data.get("divergences", ())),
            duration_s=float(data.get("duration_s", 0.0)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fraction_identical": self.fraction_identical,
            "compared": self.compared,
            "identical": self.identical,
            "divergences": [d.to_dict() for d in self.divergences],
            "duration_s": self.duration_s,
        }


def first_divergence(expected: Sequence[int], actual: Sequence[int]) -> int | None:
    """Index of the first differing token (or where one sequence ends); None if equal."""
    for position, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return position
    if len(expected) != len(actual):
        return min(len(expected), len(actual))
    return None


def generate_token_ids(client: httpx.Client, model: str, prompt: str, *, output_len: int, what: str) -> tuple[int, ...]:
    """Greedy generation of exactly ``output_len`` tokens (``ignore_eos``); the token ids."""
    payload = chat_payload(
        model,
        prompt,
        max_tokens=output_len,
        temperature=0.0,
        ignore_eos=True,
        extra={"return_token_ids": True},
    )
    body = post_json(client, "/v1/chat/completions", payload, what=what)
    try:
        token_ids = body["choices"][0]["token_ids"]
    except (KeyError, IndexError, TypeError):
        token_ids = None
    if not is_int_list(token_ids):
        raise MeasurementError(f"{what}: the answer has no token_ids (return_token_ids unsupported?)")
    return tuple(token_ids)


def generate_reference(
    base_url: str,
    model: str,
    prompts: Sequence[Prompt] | PromptSet,
    *,
    output_len: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: ProgressCallback | None = None,
) -> FidelityReference:
    """Record a baseline server's greedy token ids for ``prompts``."""
    chosen = list(prompts)
    entries = []
    with make_client(base_url, timeout_s) as client:
        for index, prompt in enumerate(chosen):
            ids = generate_token_ids(
                client,
                model,
                prompt.text,
                output_len=output_len,
                what=f"fidelity reference for prompt {prompt.id!r}",
            )
            entries.append(ReferenceEntry(id=prompt.id, prompt=prompt.text, token_ids=ids))
            report(progress, "fidelity reference", index + 1, len(chosen))
    return FidelityReference(output_len=output_len, entries=tuple(entries), model=model)


def measure_fidelity(
    base_url: str,
    model: str,
    reference: FidelityReference,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: ProgressCallback | None = None,
) -> FidelityResult:
    """Generate for the reference's prompts and compare token by token."""
    began = time.perf_counter()
    divergences = []
    with make_client(base_url, timeout_s) as client:
        for index, entry in enumerate(reference.entries):
            actual = generate_token_ids(
                client,
                model,
                entry.prompt,
                output_len=len(entry.token_ids),
                what=f"fidelity prompt {entry.id!r}",
            )
            position = first_divergence(entry.token_ids, actual)
            if position is not None:
                divergences.append(
                    Divergence(
                        id=entry.id,
                        position=position,
                        expected=_at(entry.token_ids, position),
                        actual=_at(actual, position),
                    )
                )
            report(progress, "fidelity", index + 1, len(reference.entries))
    compared = len(reference.entries)
    result = FidelityResult(
        compared=compared,
        identical=compared - len(divergences),
        divergences=tuple(divergences),
        duration_s=time.perf_counter() - began,
    )
    logger.info("greedy fidelity: %d/%d identical", result.identical, compared)
    return result


def _at(tokens: Sequence[int], position: int) -> int | None:
    return tokens[position] if position < len(tokens) else None
