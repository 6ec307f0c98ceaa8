"""The closing race: the manifest the verdicts export, against the manifest as it was.

Each switch was judged alone; the exported manifest sets them all at once,
and switches that each help need not add up. So the ablation ends as the
organizers' re-run would begin: the exported manifest and the original in
alternating pairs of fresh servers (original first in odd pairs, so the
original's tokens are the reference the exported manifest's first server
is compared with; the original's second server is the control), and the
speedup as the mean log ratio of the pairs with a paired t-interval on
their own spread (``evaluators.intervals.paired_ratio_interval``, as
``sweeper rerun`` computes it: nothing from the ablation's own figures, so the
reading that picked the switches does not count twice). ``judge_closing``
decides what the race says. The race is measured only when the exported
manifest differs from the original.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from evaluators import DEFAULT_CONFIDENCE, FidelityResult, Interval
from evaluators.intervals import paired_ratio_interval
from storage import ClosingServer
from sweeper.ablation._verdict import ClosingVerdict, OutputCheck, judge_closing, output_check, speed_of

EXPORTED, ORIGINAL = "exported", "original"
DEFAULT_CLOSING_PAIRS = 3


def changes_text(changes: Mapping[str, str]) -> str:
    """``ENFORCE_EAGER=0, FOO=1``: what the exported manifest sets otherwise than the original."""
    return ", ".join(f"{key}={value}" for key, value in changes.items())


def pair_order(pair: int) -> tuple[str, str]:
    """Who runs first in ``pair`` (from 1): the original in odd pairs, the exported manifest in even."""
    return (ORIGINAL, EXPORTED) if pair % 2 == 1 else (EXPORTED, ORIGINAL)


def compares_tokens(pair: int, side: str) -> bool:
    """Whether this server's greedy tokens are compared with the reference (the first original's):
    the exported manifest's first server, and the original's second (the control)."""
    return (pair, side) in ((1, EXPORTED), (2, ORIGINAL))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClosingPair:
    pair: int
    exported_tps: float
    original_tps: float

    @property
    def ratio(self) -> float:
        return self.exported_tps / self.original_tps


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClosingRace:
    """What the closing race measured and says (``verdict``, decided by ``judge_closing``)."""

    changes: Mapping[str, str]
    pairs: tuple[ClosingPair, ...]
    speedup: Interval | None  # None under two complete pairs
    outputs: OutputCheck
    fidelity: FidelityResult | None  # the exported manifest's first server against the original's
    control: FidelityResult | None  # the original's second server against its first
    verdict: ClosingVerdict
    servers: int
    failed_servers: int
    seconds: float

    @property
    def ratio(self) -> float | None:
        if not self.pairs:
            return None
        return math.exp(statistics.fmean(math.log(p.ratio) for p in self.pairs))

    def describe(self) -> str:
        head = f"exported ({changes_text(self.changes)}) against the original: {self.verdict.value}"
        if self.ratio is None:
            return f"{head}; no complete pair ({self.failed_servers} of {self.servers} servers failed)"
        figures = f"{self.ratio - 1:+.1%} over {len(self.pairs)} pair(s) in fresh servers"
        if self.speedup is not None:
            iv = self.speedup
            figures += (
                f" ({iv.confidence:.0%} interval {iv.low - 1:+.1%} to {iv.high - 1:+.1%}, "
                f"paired t on the pairs' own spread, {len(self.pairs) - 1} df)"
            )
        tokens = self.outputs.value
        if self.fidelity is not None:
            tokens = f"{self.fidelity.identical}/{self.fidelity.compared} identical: {tokens}"
        if self.control is not None:
            tokens += f" (the original against itself: {self.control.identical}/{self.control.compared})"
        failed = f", {self.failed_servers} failed" if self.failed_servers else ""
        return f"{head}; {figures}; outputs {tokens}; {self.servers} servers{failed}, {self.seconds / 60:.1f} min"

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": dict(self.changes),
            "verdict": self.verdict.value,
            "ratio": self.ratio,
            "speedup": self.speedup.to_dict() if self.speedup is not None else None,
            "pairs": [{**dataclasses.asdict(p), "ratio": p.ratio} for p in self.pairs],
            "outputs": self.outputs.value,
            "fidelity": self.fidelity.to_dict() if self.fidelity is not None else None,
            "control": self.control.to_dict() if self.control is not None else None,
            "servers": self.servers,
            "failed_servers": self.failed_servers,
            "seconds": self.seconds,
            "text": self.describe(),
        }


def closing_race(
    servers: Sequence[ClosingServer], changes: Mapping[str, str], *, confidence: float = DEFAULT_CONFIDENCE
) -> ClosingRace:
    """The closing race read from its stored servers (those of one export's ``changes``)."""
    by_slot = {server.slot: server for server in servers}
    pairs = []
    for pair in sorted({server.pair for server in servers}):
        exported, original = by_slot.get((pair, EXPORTED)), by_slot.get((pair, ORIGINAL))
        if exported is None or original is None or not exported.tps or not original.tps:
            continue
        if exported.state != "complete" or original.state != "complete":
            continue
        pairs.append(ClosingPair(pair=pair, exported_tps=exported.tps, original_tps=original.tps))
    speedup = (
        paired_ratio_interval([(p.exported_tps, p.original_tps) for p in pairs], confidence=confidence)
        if len(pairs) >= 2
        else None
    )
    fidelity = _fidelity(by_slot.get((1, EXPORTED)))
    control = _fidelity(by_slot.get((2, ORIGINAL)))
    outputs = output_check(fidelity, control)
    return ClosingRace(
        changes=dict(changes),
        pairs=tuple(pairs),
        speedup=speedup,
        outputs=outputs,
        fidelity=fidelity,
        control=control,
        verdict=judge_closing(speed_of(speedup), outputs),
        servers=len(servers),
        failed_servers=sum(server.state != "complete" for server in servers),
        seconds=sum(server.seconds for server in servers),
    )


def _fidelity(server: ClosingServer | None) -> FidelityResult | None:
    if server is None or not server.fidelity:
        return None
    return FidelityResult.from_dict(server.fidelity)
