"""rerun_against_base: what the organizers' re-run of an exported answer would see.

The challenge's organizers re-measure an entry on their own, beside the
baseline. Here two manifests (an exported answer and its base) are
measured in pairs, each run in a fresh server, the order alternating from
pair to pair (A B, B A, A B, ...) so that a machine getting busier or
quieter over the run hits both alike. The speedup is the mean log ratio of
the pairs with a paired t-interval on their own spread (n - 1 degrees of
freedom, no prior and nothing from the study that made the claim), so the
figure is independent of the study: if the study's claim holds, this
ratio lies inside the claimed interval.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from collections.abc import Callable
from typing import Any

from evaluators import Interval, TpsSettings, WarmupSettings, intervals
from evaluators.intervals import DEFAULT_CONFIDENCE
from sweeper._text import percent_text
from sweeper.errors import MeasurementError, UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import EvalResult, EvalSettings, Measure, evaluate, load_eval_data

logger = logging.getLogger(__name__)

ANSWER, BASE = "answer", "base"


class RerunSettingsError(UserInputError):
    """A re-run setting is not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RerunSettings:
    """How the pair is re-measured: ``pairs`` pairs, TPS at these sizes, on ``prompts`` (a file
    or hub id; None gives no set to measure on: ``sweeper rerun`` passes its default)."""

    pairs: int = 3
    tps: TpsSettings = dataclasses.field(default_factory=TpsSettings)
    prompts: str | None = None
    confidence: float = DEFAULT_CONFIDENCE
    ready_timeout_s: float = 900.0
    warmup: WarmupSettings | None = None  # None: each manifest's own warm-up bridge

    def __post_init__(self) -> None:
        if not isinstance(self.pairs, int) or isinstance(self.pairs, bool) or self.pairs < 1:
            raise RerunSettingsError(f"pairs must be a whole number >= 1, not {self.pairs!r}")
        if not 0.5 < self.confidence < 1.0:
            raise RerunSettingsError(f"confidence must be in (0.5, 1), not {self.confidence!r}")
        if not self.ready_timeout_s > 0:  # NaN too
            raise RerunSettingsError(
                f"--ready-timeout must be a positive number of seconds, not {self.ready_timeout_s!r}"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RerunPair:
    index: int  # from 1
    order: tuple[str, str]  # who ran first
    answer_tps: float
    base_tps: float

    @property
    def ratio(self) -> float:
        return self.answer_tps / self.base_tps


@dataclasses.dataclass(frozen=True, kw_only=True)
class RerunResult:
    pairs: tuple[RerunPair, ...]
    speedup: Interval | None  # None with a single pair: no spread to make an interval from

    @property
    def ratio(self) -> float:
        return math.exp(statistics.fmean(math.log(p.ratio) for p in self.pairs))

    def describe(self) -> str:
        head = f"answer / base over {len(self.pairs)} interleaved pair(s) in fresh servers: {percent_text(self.ratio)}"
        if self.speedup is None:
            return f"{head} (one pair: no interval; re-run with --pairs 3 or more)"
        iv = self.speedup
        return (
            f"{head} ({iv.confidence * 100:.0f} % interval {percent_text(iv.low)} to {percent_text(iv.high)}, "
            f"paired t on the pairs' own spread, {len(self.pairs) - 1} df)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "speedup": self.speedup.to_dict() if self.speedup is not None else None,
            "pairs": [{**dataclasses.asdict(p), "ratio": p.ratio} for p in self.pairs],
            "text": self.describe(),
        }


def _speedup_interval(pairs: list[tuple[float, float]], *, confidence: float) -> Interval | None:
    """The paired t-interval of answer / base from (answer, base) pairs, on their own spread;
    None under 2 pairs, where ``intervals.paired_ratio_interval`` has no spread to use."""
    if len(pairs) < 2:
        return None
    return intervals.paired_ratio_interval(pairs, confidence=confidence)


def rerun_against_base(
    answer: Manifest,
    base: Manifest,
    settings: RerunSettings,
    *,
    measure: Measure | None = None,
    progress: Callable[[str], None] | None = None,
) -> RerunResult:
    """Measure ``answer`` and ``base`` in ``settings.pairs`` alternating pairs of fresh servers.

    ``measure`` (default: ``sweeper.measure.evaluate``, one fresh server per
    call) is a seam for tests of the ordering; every figure goes through it.
    """
    eval_settings = EvalSettings(
        prompts=settings.prompts,
        tps=settings.tps,
        ppl=None,
        warmup=settings.warmup,
        ready_timeout_s=settings.ready_timeout_s,
    )
    if measure is None:
        data = load_eval_data(answer, eval_settings)

        def measure(manifest: Manifest, s: EvalSettings) -> EvalResult:
            return evaluate(manifest, s, data=data)

    manifests = {ANSWER: answer, BASE: base}
    pairs = []
    for index in range(1, settings.pairs + 1):
        order = (ANSWER, BASE) if index % 2 == 1 else (BASE, ANSWER)
        figures: dict[str, float] = {}
        for who in order:
            if progress is not None:
                progress(f"pair {index}/{settings.pairs}: {who}")
            result = measure(manifests[who], eval_settings)
            if result.tps is None or result.tps.tps is None:
                raise MeasurementError(f"pair {index}: the {who} manifest's TPS run did not complete")
            figures[who] = float(result.tps.tps)
            logger.info("pair %d: %s %.2f tok/s", index, who, figures[who])
        pairs.append(RerunPair(index=index, order=order, answer_tps=figures[ANSWER], base_tps=figures[BASE]))
    interval = _speedup_interval([(p.answer_tps, p.base_tps) for p in pairs], confidence=settings.confidence)
    return RerunResult(pairs=tuple(pairs), speedup=interval)
