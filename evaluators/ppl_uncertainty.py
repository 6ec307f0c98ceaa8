"""PPL on records nobody has seen: the uncertainty that comes from the records.

A PPL measured on ``m`` records is one draw of the records' population: the
organizers' private re-run scores other records "of this kind". The records
are the sampling unit. The mean NLL per token is a ratio estimator; its
standard error as an estimate of the population's log PPL (no
finite-population correction: the population is every record the
organizers could draw, not the file) is

    se = sqrt(sum_i r_i^2 / (m - 1) / m) / mean_tokens,   r_i = nll_i - mean * tokens_i

(``record_stderr``). The log PPL of ``k`` fresh records then differs from
the one measured by a normal error of standard deviation
``se * sqrt(1 + m / k)``: the population's log PPL is off the measured one
by ``se``, and the ``k`` new records scatter around it by ``se * sqrt(m /
k)``, independently. So::

    P(PPL on k new records <= cap) = T_{m-1}((log cap - log ppl) / (se * sqrt(1 + m / k)))

(``pass_probability``), with Student's t on the ``m - 1`` degrees of
freedom the standard error was estimated with (a normal quantile would
make a 90 % bound on 4 records cover about 83 % of re-runs; t, about
87 %); with ``k`` None it is the chance that the population's PPL (the
"true" one) is under the cap. The upper bound at level ``c`` is
``ppl * exp(t_{c, m-1} * se * sqrt(1 + m / k))`` (``PplEstimate.upper``).
``RerunSpread`` carries the SD with its degrees of freedom, and
``rerun_spread`` picks it for a gate: the trial's own, the paired one
against a baseline on common records, or both in quadrature.

The approximation was checked against a bootstrap of the records
(``bootstrap_pass_probability``, an independent computation) and by
coverage on real records split many ways (``tests/evaluators/test_ppl_uncertainty.py``,
``benchmarks/ppl_gate.py``).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from evaluators._common import finite_or_none
from evaluators.intervals import Interval, t_cdf, t_quantile


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordScore:
    """One record's negative log-likelihood over its scored tokens."""

    id: str
    nll: float
    tokens: int

    @property
    def finite(self) -> bool:
        return math.isfinite(self.nll)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nll": finite_or_none(self.nll), "tokens": self.tokens}


@dataclasses.dataclass(frozen=True)
class RerunSpread:
    """The error of log PPL on a re-run around the measured one: its SD and the degrees of
    freedom of the standard error it rests on (records - 1), for Student's t."""

    sd: float
    df: int

    def __post_init__(self) -> None:
        if not self.sd >= 0 or self.df < 1:
            raise ValueError(f"RerunSpread needs sd >= 0 and df >= 1, not {self.sd!r}, {self.df!r}")

    def probability_within(self, margin: float) -> float:
        """P(error <= ``margin``): the chance a re-run's log PPL is at most ``margin`` over this one."""
        if self.sd == 0 or not math.isfinite(self.sd):
            return (1.0 if margin >= 0 else 0.0) if self.sd == 0 else (0.5 if margin >= 0 else 0.0)
        return t_cdf(margin / self.sd, self.df)

    def quantile(self, level: float) -> float:
        """The error a re-run stays under with probability ``level``."""
        if self.sd == 0:
            return 0.0
        return t_quantile(level, self.df) * self.sd


def rerun_spread(
    estimate: PplEstimate,
    new_records: int | None,
    *,
    paired: tuple[float, int] | None = None,
    reference: PplEstimate | None = None,
) -> RerunSpread:
    """The spread a gate judges ``estimate`` with, on ``new_records`` fresh records.

    ``paired``: the standard error of log(PPL / baseline PPL) from the per-record
    differences and the records it rests on (a relative cap judged on common records);
    else ``reference``: the baseline's own estimate, added in quadrature (fewer degrees
    of freedom of the two); else the estimate's own.
    """
    if paired is not None:
        return RerunSpread(predictive_sd(paired[0], paired[1], new_records), max(paired[1] - 1, 1))
    own = estimate.sd(new_records)
    if reference is not None and reference.records >= 2:
        return RerunSpread(
            math.hypot(own, reference.sd(new_records)),
            max(min(estimate.records, reference.records) - 1, 1),
        )
    return RerunSpread(own, max(estimate.records - 1, 1))


def record_stderr(scores: Sequence[RecordScore]) -> float:
    """The standard error of log PPL, records as the sampling unit (inf: fewer than 2 or non-finite)."""
    m = len(scores)
    if m < 2 or not all(s.finite for s in scores):
        return math.inf
    tokens = sum(s.tokens for s in scores)
    if tokens <= 0:
        return math.inf
    mean = sum(s.nll for s in scores) / tokens
    residuals = [s.nll - mean * s.tokens for s in scores]
    variance = sum(r * r for r in residuals) / (m - 1)
    return math.sqrt(variance / m) / (tokens / m)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairedPpl:
    """log(PPL_a / PPL_b) over the records both scored, with its standard error (records as the unit)."""

    log_ratio: float
    stderr: float
    records: int

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def interval(self, confidence: float) -> Interval:
        """A two-sided t-interval of PPL_a / PPL_b on ``records`` - 1 degrees of freedom."""
        half = t_quantile(0.5 + confidence / 2.0, self.records - 1) * self.stderr
        return Interval(
            value=self.ratio,
            low=math.exp(self.log_ratio - half),
            high=math.exp(self.log_ratio + half),
            confidence=confidence,
            method=f"paired per-record NLL differences over {self.records} common records, t-interval",
            samples=self.records,
        )


def paired_log_ppl(a: Mapping[str, RecordScore], b: Mapping[str, RecordScore]) -> PairedPpl | None:
    """``a``'s PPL over ``b``'s on the records both scored (by id), as a paired difference.

    Over common records log PPL_a - log PPL_b = sum(nll_a - nll_b) / sum(tokens),
    a ratio of record sums like log PPL itself, so ``record_stderr`` of the
    per-record differences is its standard error: what the records share
    cancels. None under 2 common records, with a record scored over a
    different token count, or with a non-finite difference.
    """
    common = sorted(set(a) & set(b))
    if len(common) < 2 or any(a[k].tokens != b[k].tokens for k in common):
        return None
    differences = [RecordScore(id=k, nll=a[k].nll - b[k].nll, tokens=a[k].tokens) for k in common]
    if not all(d.finite for d in differences):
        return None
    tokens = sum(d.tokens for d in differences)
    if tokens <= 0:
        return None
    return PairedPpl(
        log_ratio=sum(d.nll for d in differences) / tokens,
        stderr=record_stderr(differences),
        records=len(common),
    )


def predictive_sd(stderr_log_ppl: float, records: int, new_records: int | None) -> float:
    """SD of log PPL on ``new_records`` fresh records around the measured one (None: the population)."""
    if new_records is None:
        return stderr_log_ppl
    if new_records < 1:
        raise ValueError(f"new_records must be at least 1, not {new_records}")
    if records < 1:
        raise ValueError(f"records must be at least 1, not {records}")
    return stderr_log_ppl * math.sqrt(1.0 + records / new_records)


def pass_probability(
    ppl: float,
    stderr_log_ppl: float,
    records: int,
    cap: float,
    new_records: int | None = None,
) -> float:
    """The chance that PPL on ``new_records`` fresh records of this kind is at most ``cap``.

    ``ppl``, ``stderr_log_ppl`` (``record_stderr``: no finite-population
    correction) and ``records`` are a stored trial's figures; ``new_records``
    None asks about the population's PPL. An infinite or NaN PPL gives 0; an
    unknown (infinite) standard error gives 0.5 at best.
    """
    if not math.isfinite(ppl) or ppl <= 0 or not cap > 0:
        return 0.0
    margin = math.log(cap) - math.log(ppl)
    if not math.isfinite(stderr_log_ppl) or stderr_log_ppl < 0:
        return 0.5 if margin >= 0 else 0.0
    spread = RerunSpread(predictive_sd(stderr_log_ppl, records, new_records), max(records - 1, 1))
    return spread.probability_within(margin)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplEstimate:
    """A measured PPL with its record-sampling uncertainty."""

    ppl: float
    stderr_log_ppl: float  # record_stderr: of the population's log PPL
    records: int

    def __post_init__(self) -> None:
        if isinstance(self.records, bool) or not isinstance(self.records, int) or self.records < 1:
            raise ValueError(f"PplEstimate.records must be a positive integer, not {self.records!r}")
        if not self.stderr_log_ppl >= 0:
            raise ValueError(f"PplEstimate.stderr_log_ppl must be non-negative, not {self.stderr_log_ppl!r}")

    @classmethod
    def from_scores(cls, scores: Sequence[RecordScore]) -> PplEstimate:
        tokens = sum(s.tokens for s in scores)
        nll = sum(s.nll for s in scores)
        ppl = math.exp(nll / tokens) if tokens and math.isfinite(nll) else math.inf
        return cls(ppl=ppl, stderr_log_ppl=record_stderr(scores), records=len(scores))

    def sd(self, new_records: int | None = None) -> float:
        return predictive_sd(self.stderr_log_ppl, self.records, new_records)

    def spread(self, new_records: int | None = None) -> RerunSpread:
        return RerunSpread(self.sd(new_records), max(self.records - 1, 1))

    def interval(self, level: float) -> tuple[float, float]:
        """The two-sided ``level`` interval of the records' population PPL (Student's t)."""
        if not math.isfinite(self.ppl):
            return math.inf, math.inf
        half = self.spread().quantile(0.5 + level / 2)
        return self.ppl * math.exp(-half), self.ppl * math.exp(half)

    def pass_probability(self, cap: float, new_records: int | None = None) -> float:
        return pass_probability(self.ppl, self.stderr_log_ppl, self.records, cap, new_records)

    def upper(self, confidence: float, new_records: int | None = None) -> float:
        """The one-sided upper bound of PPL (on ``new_records`` fresh records) at ``confidence``."""
        if not 0.5 <= confidence < 1.0:
            raise ValueError(f"confidence must be in [0.5, 1), not {confidence}")
        if not math.isfinite(self.ppl):
            return math.inf
        spread = self.spread(new_records).quantile(confidence)
        return math.exp(math.log(self.ppl) + spread) if math.isfinite(spread) else math.inf

    def describe(self, cap: float, new_records: int | None = None) -> str:
        """``PPL 2.401; on 16 new records of this kind, under 2.42 with probability 0.93``."""
        where = "the records' population" if new_records is None else f"{new_records} new records of this kind"
        return (
            f"PPL {self.ppl:.4f}; on {where}, under {cap:g} with probability "
            f"{self.pass_probability(cap, new_records):.2f}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def bootstrap_pass_probability(
    scores: Sequence[RecordScore],
    cap: float,
    new_records: int,
    *,
    draws: int = 4000,
    seed: int = 0,
) -> float:
    """The same chance by a bootstrap: no normal approximation, no standard-error formula.

    Each draw resamples the ``m`` measured records (the population is off the
    measurement as a resample is off the sample) and ``new_records`` records
    from the measured ones (the new set's own scatter), and counts the new
    set's PPL, shifted by the resample's error, as passing when it is at most
    ``cap``.
    """
    rng = random.Random(seed)
    m = len(scores)
    base = sum(s.nll for s in scores) / sum(s.tokens for s in scores)
    passed = 0
    for _ in range(draws):
        again = [scores[rng.randrange(m)] for _ in range(m)]
        fresh = [scores[rng.randrange(m)] for _ in range(new_records)]
        error = sum(s.nll for s in again) / sum(s.tokens for s in again) - base
        # the population sits at base - error, the new records scatter around it
        new = sum(s.nll for s in fresh) / sum(s.tokens for s in fresh) - error
        passed += new <= math.log(cap)
    return passed / draws
