"""Speculative-decoding acceptance from vLLM's Prometheus ``/metrics``.

vLLM counts drafts, draft tokens, accepted tokens and accepted tokens per
draft position since it started. Two scrapes around a measurement, and their
difference, give the acceptance of exactly that measurement::

    before = scrape_spec_decode(base_url)
    ...   # the measured requests
    stats = spec_decode_delta(before, scrape_spec_decode(base_url))
    stats.mean_acceptance_length   # tokens emitted per draft-and-verify step
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

import httpx

from evaluators.errors import MeasurementError

logger = logging.getLogger(__name__)

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpecDecodeCounters:
    """One scrape of the cumulative counters (summed over engines)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpecDecodeStats:
    """Acceptance over one measurement (the difference of two scrapes).

    ``per_position_acceptance[i]`` is the fraction of drafts whose token at
    position ``i`` was accepted; ``mean_acceptance_length`` is 1 + accepted
    tokens per draft: the tokens one draft-and-verify step emits.
    """

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    per_position_acceptance: tuple[float, ...]
    acceptance_rate: float | None
    mean_acceptance_length: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {
            "accepted_per_position": list(self.accepted_per_position),
            "per_position_acceptance": list(self.per_position_acceptance),
        }


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text format -> metric name -> [(labels, value), ...]."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
        samples.setdefault(match["name"], []).append((labels, value))
    return samples


def counters_from_metrics(text: str) -> SpecDecodeCounters | None:
    """The spec-decode counters in a ``/metrics`` text, or None if it has none (no drafter)."""
    samples = parse_metrics(text)
    if DRAFTS not in samples:
        return None
    per_position: dict[int, float] = {}
    for labels, value in samples.get(ACCEPTED_PER_POSITION, []):
        try:
            position = int(labels.get("position", ""))
        except ValueError:
            continue
        per_position[position] = per_position.get(position, 0.0) + value
    size = max(per_position, default=-1) + 1
    return SpecDecodeCounters(
        drafts=_total(samples, DRAFTS),
        draft_tokens=_total(samples, DRAFT_TOKENS),
        accepted_tokens=_total(samples, ACCEPTED),
        accepted_per_position=tuple(per_position.get(i, 0.0) for i in range(size)),
    )


def _total(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, []))


def scrape_spec_decode(base_url: str, *, client: httpx.Client | None = None) -> SpecDecodeCounters | None:
    """GET ``/metrics`` and read the spec-decode counters (None: the server has no drafter)."""
    url = f"{base_url.rstrip('/')}/metrics"
    try:
        if client is not None:
            response = client.get("/metrics")
        else:
            response = httpx.get(url, timeout=30.0)
    except httpx.HTTPError as exc:
        raise MeasurementError(f"reading {url} failed ({exc})") from exc
    if response.status_code != 200:
        raise MeasurementError(f"reading {url}: answered {response.status_code}")
    return counters_from_metrics(response.text)


def spec_decode_delta(before: SpecDecodeCounters | None, after: SpecDecodeCounters | None) -> SpecDecodeStats | None:
    """Acceptance between two scrapes; None when the server does no speculative decoding."""
    if before is None or after is None:
        return None
    drafts = round(after.drafts - before.drafts)
    draft_tokens = round(after.draft_tokens - before.draft_tokens)
    accepted = round(after.accepted_tokens - before.accepted_tokens)
    size = max(len(before.accepted_per_position), len(after.accepted_per_position))
    old = before.accepted_per_position + (0.0,) * (size - len(before.accepted_per_position))
    new = after.accepted_per_position + (0.0,) * (size - len(after.accepted_per_position))
    per_position = tuple(round(b - a) for a, b in zip(old, new, strict=True))
    if min((drafts, draft_tokens, accepted, *per_position), default=0) < 0:
        raise MeasurementError("the spec-decode counters went down between two scrapes (did the server restart?)")
    return SpecDecodeStats(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_position=per_position,
        per_position_acceptance=tuple(n / drafts for n in per_position) if drafts else (),
        acceptance_rate=accepted / draft_tokens if draft_tokens else None,
        mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
    )
