"""A stored PPL as the user reads it: its interval, and the chance a re-run passes the cap.

``ppl_statement`` reads what the gate stored with a trial (or a verification
run) and states it as ``PplStatement``: the two-sided interval of the
records' population PPL, and the chance that PPL on fresh records of this
kind is at most the cap, as the gate computes it (``_gate.py``): the gate's
own figure where the trial stored it, else worked out again on the stored
standard errors (paired with the baseline where the trial was judged so).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

from evaluators.ppl_uncertainty import PplEstimate, rerun_spread
from sweeper.study._gate import (
    PAIRED_KEY,
    PAIRED_RECORDS_KEY,
    PASS_PROBABILITY_KEY,
    RERUN_RECORDS_KEY,
    stored_estimate,
)

logger = logging.getLogger(__name__)

# the two-sided level of the PPL interval shown beside a PPL (status, report, export, verify)
PPL_INTERVAL_LEVEL = 0.95


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplStatement:
    """A PPL as shown: its interval and the chance that a re-run on new records passes the cap.

    ``low``/``high``: the two-sided ``level`` interval of the records'
    population PPL (None: no standard error, so no interval);
    ``pass_probability``: the chance that PPL on ``rerun_records`` fresh
    records of this kind is at most ``cap``; ``baseline_noise``: the
    baseline's own record noise is in it (a relative cap, as the gate judges);
    ``paired``: judged against the baseline on the records both scored.
    """

    ppl: float
    records: int | None
    low: float | None
    high: float | None
    level: float
    cap: float | None
    baseline_noise: bool
    rerun_records: int | None
    pass_probability: float | None
    paired: bool = False
    # under a relative cap judged on common records: the interval of the PPL against the
    # baseline on those records, the one ``within_noise`` tests (None: ``low``-``high``)
    noise_low: float | None = None
    noise_high: float | None = None

    @property
    def known(self) -> bool:
        """Is there an interval (a standard error from per-record scores)?"""
        return self.low is not None and self.high is not None

    @property
    def within_noise(self) -> bool:
        """Is the cap inside the interval: can the records not tell whether the PPL is under it?

        Under a relative cap judged on common records, the interval is the paired one: the
        baseline's own PPL, which moves with the same records, leaves it."""
        if self.low is None or self.high is None or self.cap is None:  # not ``known``
            return False
        if self.noise_low is not None and self.noise_high is not None:
            return self.noise_low < self.cap < self.noise_high
        return self.low <= self.cap <= self.high

    def interval_text(self) -> str:
        """``95 % interval 2.3800-2.4200 over 32 records`` (or why there is none)."""
        if not math.isfinite(self.ppl):
            return "no interval: a non-finite logprob"
        if not self.known:
            return "no interval: no per-record scores"
        return f"{self.level * 100:.0f} % interval {self.low:.4f}-{self.high:.4f} over {self.records} records"

    def chance_text(self) -> str | None:
        """``on 16 new records of this kind, under 2.4200 with probability 0.93`` (None: unknown)."""
        if self.pass_probability is None or self.cap is None or self.rerun_records is None:
            return None
        noise = " (the baseline's record noise included)" if self.baseline_noise else ""
        if self.paired:
            noise = " (against the baseline on the same records)"
        return (
            f"on {self.rerun_records} new records of this kind, under {self.cap:.4f} with "
            f"probability {probability_text(self.pass_probability)}{noise}"
        )

    def text(self) -> str:
        """``PPL 2.4010 (95 % interval 2.3800-2.4200 over 32 records); on 16 new records ...``."""
        head = f"PPL {'inf' if not math.isfinite(self.ppl) else f'{self.ppl:.4f}'} ({self.interval_text()})"
        chance = self.chance_text()
        return f"{head}; {chance}" if chance else head

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ppl"] = self.ppl if math.isfinite(self.ppl) else "inf"
        data["within_noise"] = self.within_noise
        data["text"] = self.text()
        return data


def probability_text(probability: float) -> str:
    """``0.93``; ``above 0.99`` and ``below 0.01`` where two digits would read as certain."""
    if probability >= 0.995:
        return "above 0.99"
    if probability < 0.005:
        return "below 0.01"
    return f"{probability:.2f}"


def settings_reference(settings: Mapping[str, Any]) -> PplEstimate | None:
    """The baseline's PPL with its uncertainty, from a study's stored settings (``study_status``)."""
    ppl, stderr, records = (
        settings.get("reference_ppl"),
        settings.get("reference_stderr_log_ppl"),
        settings.get("reference_ppl_records"),
    )
    if not isinstance(ppl, (int, float)) or not isinstance(stderr, (int, float)):
        return None
    if not isinstance(records, int) or records < 1 or not math.isfinite(float(stderr)):
        return None
    return PplEstimate(ppl=float(ppl), stderr_log_ppl=float(stderr), records=records)


def ppl_statement(
    ppl: float | None,
    extras: Mapping[str, Any],
    cap: float | None,
    settings: Mapping[str, Any] | None = None,
    *,
    new_records: int | None = None,
    level: float = PPL_INTERVAL_LEVEL,
) -> PplStatement | None:
    """A stored PPL as the user reads it (None: no PPL).

    ``extras``: a trial's (what ``GateVerdict.extras`` wrote) or a
    verification run's (``ppl_stderr_records`` and ``ppl_records``).
    ``settings``: the study's stored settings (its gate's re-run size and,
    under a relative cap, the baseline's uncertainty). The re-run's chance
    is the gate's own figure where the trial stored it; else it is computed
    as the gate computes it, on ``new_records`` (default: the gate's
    ``ppl_rerun_records``, else as many records as were scored).
    """
    if ppl is None:
        return None
    settings = settings or {}
    reference = settings_reference(settings) if settings.get("ppl_cap_rel") is not None else None
    if reference is not None and reference.records < 2:
        reference = None  # the gate adds a baseline's noise only when it has one
    estimate = stored_estimate(ppl, extras) if math.isfinite(ppl) else None
    if estimate is None:  # no per-record scores, or an infinite PPL: no interval
        return PplStatement(
            ppl=float(ppl),
            level=level,
            cap=cap,
            records=None,
            low=None,
            high=None,
            baseline_noise=False,
            rerun_records=None,
            pass_probability=None,
        )
    low, high = estimate.interval(level)
    stored_p, stored_k = extras.get(PASS_PROBABILITY_KEY), extras.get(RERUN_RECORDS_KEY)
    paired = _stored_paired(extras, estimate.records) if reference is not None else None
    noise_low = noise_high = None
    if paired is not None:  # the interval the cap is judged in: the paired one, against the baseline
        half = rerun_spread(estimate, None, paired=paired).quantile(0.5 + level / 2)
        noise_low, noise_high = estimate.ppl * math.exp(-half), estimate.ppl * math.exp(half)
    if isinstance(stored_p, (int, float)) and isinstance(stored_k, int) and new_records in (None, stored_k):
        probability, rerun = float(stored_p), stored_k
    elif cap is None:
        probability, rerun = None, None
    else:
        rerun = new_records or settings.get("ppl_rerun_records") or estimate.records
        spread = rerun_spread(estimate, rerun, paired=paired, reference=reference)
        probability = spread.probability_within(math.log(cap) - math.log(estimate.ppl))
    return PplStatement(
        ppl=float(ppl),
        level=level,
        cap=cap,
        records=estimate.records,
        low=low,
        high=high,
        baseline_noise=reference is not None,
        rerun_records=rerun,
        pass_probability=probability,
        paired=paired is not None,
        noise_low=noise_low,
        noise_high=noise_high,
    )


def _stored_paired(extras: Mapping[str, Any], records: int) -> tuple[float, int] | None:
    """The paired standard error a trial was judged on and its records (older trials: their own)."""
    stderr, common = extras.get(PAIRED_KEY), extras.get(PAIRED_RECORDS_KEY)
    if not isinstance(stderr, (int, float)) or not math.isfinite(stderr) or stderr < 0:
        return None
    return float(stderr), common if isinstance(common, int) and common >= 2 else records
