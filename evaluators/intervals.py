"""How sure a TPS figure is: intervals from the requests of one run and from repeats.

Two sources of spread, kept apart because they answer different questions:

* **Within one server.** TPS is the output tokens over the wall clock of
  the measured requests. The requests of a run differ (prompt lengths,
  acceptance of speculative tokens), so another draw of prompts of the same
  kind would read a little differently. ``request_interval`` resamples the
  requests (a percentile bootstrap of the ratio tokens / latency) and
  scales it to the run's own TPS, so the interval also carries the small
  time between requests that the wall clock sees.
* **Between servers.** The same configuration in a fresh server reads
  differently again (CPU placement, compile results, GPU clocks): 10-20 %
  on 2 shared CPU cores. Only repeats in fresh servers show it;
  ``repeat_interval`` gives a t-interval for their mean.

Comparing two configurations (a contender against the incumbent, the answer
against the base manifest) is a question about the between-server spread:
``pooled_spread`` estimates it on the log scale from every configuration
measured more than once (a prior figure, with its own weight, stands in
until there are repeats), and ``speedup_interval`` gives the ratio of two
configurations' geometric-mean TPS with a t-interval on that spread.
``paired_ratio_interval`` (and ``ratio_interval``) judge side-by-side pairs
on their own spread instead; ``screen_floor`` is the screen figure below
which a contender is not measured in full.

This module is the one home of the statistics: Student's t (``t_quantile``,
``t_cdf``), the prior spread (``PRIOR_SPREAD``) and the default confidence
(``DEFAULT_CONFIDENCE``) are defined here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

from evaluators.errors import MeasurementError

DEFAULT_CONFIDENCE = 0.95  # of every TPS and speedup interval unless a caller asks for another
PRIOR_SPREAD = 0.10  # SD of log TPS between fresh servers assumed until repeats measure it (0.10: 10 %)
SCREEN_FLOOR_ERRORS = 2.0  # standard errors of a difference of single figures below the incumbent's screen


@dataclasses.dataclass(frozen=True, kw_only=True)
class Interval:
    """``low``-``high`` around ``value`` at ``confidence``; ``method`` says how it was made."""

    value: float
    low: float
    high: float
    confidence: float
    method: str
    samples: int

    @property
    def relative_half_width(self) -> float:
        """Half the width as a share of the value (0.05: +-5 %)."""
        return (self.high - self.low) / 2.0 / self.value if self.value else math.inf

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def request_interval(
    tokens: Sequence[int],
    latencies_s: Sequence[float],
    *,
    tps: float | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Bootstrap interval of a run's TPS from its requests' token counts and latencies.

    ``tps`` is the run's own figure (tokens over the wall clock); None takes
    the ratio of the sums. The bootstrap draws ``resamples`` sets of the
    same size with replacement, seeded, so the interval is reproducible.
    """
    _check_confidence(confidence)
    if len(tokens) != len(latencies_s):
        raise MeasurementError("request_interval: tokens and latencies differ in length")
    if len(tokens) < 2:
        raise MeasurementError("request_interval: at least 2 requests are needed")
    if any(latency <= 0 for latency in latencies_s):
        raise MeasurementError("request_interval: every latency must be positive")
    ratio = sum(tokens) / sum(latencies_s)
    value = ratio if tps is None else float(tps)
    scale = value / ratio
    rng = random.Random(seed)
    count = len(tokens)
    pairs = list(zip(tokens, latencies_s))
    ratios = []
    for _ in range(resamples):
        drawn = [pairs[rng.randrange(count)] for _ in range(count)]
        ratios.append(sum(t for t, _ in drawn) / sum(s for _, s in drawn))
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    low = _quantile(ratios, tail) * scale
    high = _quantile(ratios, 1.0 - tail) * scale
    return Interval(
        value=value,
        low=low,
        high=high,
        confidence=confidence,
        method=f"bootstrap over {count} requests ({resamples} resamples)",
        samples=count,
    )


def repeat_interval(values: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Student-t interval of the mean of repeated figures (fresh servers)."""
    _check_confidence(confidence)
    if len(values) < 2:
        raise MeasurementError("repeat_interval: at least 2 repeats are needed")
    mean = statistics.fmean(values)
    half = _two_sided_quantile(confidence, len(values) - 1) * (statistics.stdev(values) / math.sqrt(len(values)))
    return Interval(
        value=mean,
        low=mean - half,
        high=mean + half,
        confidence=confidence,
        method=f"t-interval over {len(values)} repeats",
        samples=len(values),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spread:
    """Between-server spread of one TPS measurement: the SD of log TPS, on ``df`` degrees of freedom.

    0.10 means a fresh server reads about 10 % away from the configuration's
    typical figure (one standard deviation). ``measured_df`` counts the
    degrees of freedom that came from repeats, the rest is the prior's weight.
    """

    relative: float
    df: float
    measured_df: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def pooled_spread(groups: Sequence[Sequence[float]], *, prior: float, prior_df: float = 2.0) -> Spread:
    """Pool the spread of log TPS over ``groups`` (each: one configuration's TPS figures).

    Each group of n figures adds n - 1 degrees of freedom; ``prior`` (the
    SD of log TPS expected on this kind of machine) counts as ``prior_df``
    more. With no repeats at all, the prior is the answer.
    """
    if prior <= 0 or prior_df < 0:
        raise MeasurementError(f"pooled_spread: prior must be > 0 and prior_df >= 0, not {prior}, {prior_df}")
    squares = prior * prior * prior_df
    measured = 0
    for group in groups:
        logs = [_log_tps(value) for value in group]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        measured += len(logs) - 1
    df = prior_df + measured
    if df <= 0:
        raise MeasurementError("pooled_spread: no repeats and no prior weight")
    relative = math.sqrt(squares / df)
    return Spread(
        relative=relative,
        df=df,
        measured_df=measured,
        method=(
            f"SD of log TPS pooled over {measured} repeat degrees of freedom"
            f" and a prior of {prior:.3f} weighted as {prior_df:g}"
        ),
    )


class PriorFit(str, enum.Enum):
    """How a study's repeats stand against the prior spread it was given (``prior_fit``); a
    decision, printed and stored as its word."""

    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    FITS = "fits"  # the repeats' spread is one the prior could have produced
    HOST_NOISIER = "noisier"  # well above the prior: the intervals lean on a prior too narrow
    HOST_QUIETER = "quieter"  # well below: the prior keeps intervals wider than this host needs


PRIOR_FIT_CONFIDENCE = 0.99


@dataclasses.dataclass(frozen=True, kw_only=True)
class PriorCheck:
    """The repeats' own spread (SD of log TPS on ``df`` degrees of freedom, no prior in it)
    against ``prior``, with the verdict of a two-sided chi-square test at ``confidence``.

    ``suggested``: the ``--noise`` a next study on this host should pass. Raising the prior is
    the safe direction, so a host noisier than the prior gets the measured figure; lowering it
    narrows intervals before a study has repeats of its own, so a quieter host gets only the
    one-sided 95 % upper bound of the measured figure (never below 0.01)."""

    fit: PriorFit
    measured: float
    df: int
    prior: float
    confidence: float
    suggested: float

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "fit": self.fit.value, "text": self.describe()}

    def describe(self) -> str:
        """'' when the repeats fit the prior; else the sentence that says what to pass next time."""
        if self.fit is PriorFit.FITS:
            return ""
        head = (
            f"the repeats alone show {self.measured:.1%} on {self.df} df, "
            f"{'above' if self.fit is PriorFit.HOST_NOISIER else 'below'} the prior of {self.prior:.1%} "
            f"(chi-square, {self.confidence:.0%}): "
        )
        if self.fit is PriorFit.HOST_NOISIER:
            return head + f"a study on this host should pass --noise {self.suggested:.2f}"
        return head + f"a study on this host may pass --noise {self.suggested:.2f} (their 95 % upper bound)"


def prior_fit(
    groups: Sequence[Sequence[float]], *, prior: float, confidence: float = PRIOR_FIT_CONFIDENCE
) -> PriorCheck | None:
    """Whether the spread of log TPS over ``groups`` (each: one configuration's figures) could
    come from a between-server SD of ``prior``: the pooled sum of squares over prior**2 is
    chi-square on the repeats' degrees of freedom if it could. None: no configuration was
    measured twice."""
    _check_confidence(confidence)
    if not prior > 0:
        raise MeasurementError(f"prior_fit: prior must be > 0, not {prior}")
    if not any(len(group) >= 2 for group in groups):
        return None
    measured = pooled_spread(groups, prior=prior, prior_df=0.0)
    from scipy.stats import chi2

    df = measured.measured_df
    squares = measured.relative**2 * df
    alpha = 1.0 - confidence
    if squares / prior**2 > chi2.ppf(1.0 - alpha / 2.0, df):
        fit, suggested = PriorFit.HOST_NOISIER, measured.relative
    elif squares / prior**2 < chi2.ppf(alpha / 2.0, df):
        fit, suggested = PriorFit.HOST_QUIETER, math.sqrt(squares / chi2.ppf(0.05, df))
    else:
        fit, suggested = PriorFit.FITS, prior
    suggested = min(max(suggested, 0.01), 0.99)  # what --noise takes, at the precision it is written
    return PriorCheck(
        fit=fit, measured=measured.relative, df=df, prior=prior, confidence=confidence, suggested=suggested
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class NestedSpread:
    """Where the spread of log TPS lies: between fresh servers, or between runs inside one.

    ``between`` is the SD of a server's true level around the configuration's
    (what only a fresh server samples), ``within`` the SD of one run around
    its server's level (what repeats in a live server average away). A single
    run in a fresh server varies by ``sqrt(between**2 + within**2)``; the mean
    of ``m`` runs in each of two servers compared differs by
    ``sqrt(2 * (between**2 + within**2 / m))`` (``pair_sd``). One-way
    random-effects ANOVA (method of moments; ``between`` is 0 where the
    servers' means vary no more than their runs predict), with a ``confidence``
    interval on ``within`` (chi-square) and on the spread of the servers' means.
    """

    between: float
    within: float
    servers: int
    runs_per_server: float  # the mean count; groups of unequal size use the usual n0
    within_df: int
    between_df: int
    within_low: float
    within_high: float
    server_means_sd: float  # SD of the servers' mean log TPS
    server_means_low: float
    server_means_high: float
    f_p_value: float  # P(F >= observed) if servers did not differ beyond their runs

    @property
    def single_run(self) -> float:
        return math.sqrt(self.between**2 + self.within**2)

    @property
    def within_share(self) -> float:
        """The share of a single run's variance that lies inside a server."""
        total = self.between**2 + self.within**2
        return self.within**2 / total if total else 0.0

    def pair_sd(self, runs: int) -> float:
        """SD of the log ratio of two servers' means of ``runs`` runs each."""
        return math.sqrt(2.0 * (self.between**2 + self.within**2 / runs))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "single_run": self.single_run, "within_share": self.within_share}


def nested_spread(servers: Sequence[Sequence[float]], *, confidence: float = DEFAULT_CONFIDENCE) -> NestedSpread:
    """Split the spread of TPS figures ``servers`` (one sequence of runs per fresh server of one
    configuration) into between-server and within-server parts (``NestedSpread``)."""
    _check_confidence(confidence)
    groups = [[_log_tps(value) for value in runs] for runs in servers if len(runs) > 0]
    if len(groups) < 2 or any(len(g) < 2 for g in groups):
        raise MeasurementError("nested_spread: at least 2 servers with at least 2 runs each")
    from scipy.stats import chi2, f

    n = [len(g) for g in groups]
    total_n, k = sum(n), len(groups)
    means = [statistics.fmean(g) for g in groups]
    grand = sum(sum(g) for g in groups) / total_n
    ss_within = sum(sum((x - m) ** 2 for x in g) for g, m in zip(groups, means, strict=True))
    ss_between = sum(size * (m - grand) ** 2 for size, m in zip(n, means, strict=True))
    df_w, df_b = total_n - k, k - 1
    ms_w, ms_b = ss_within / df_w, ss_between / df_b
    n0 = (total_n - sum(size * size for size in n) / total_n) / df_b
    between_var = max(0.0, (ms_b - ms_w) / n0)
    alpha = 1.0 - confidence
    means_sd = statistics.stdev(means)
    f_value = ms_b / ms_w if ms_w > 0 else math.inf
    return NestedSpread(
        between=math.sqrt(between_var),
        within=math.sqrt(ms_w),
        servers=k,
        runs_per_server=n0,
        within_df=df_w,
        between_df=df_b,
        within_low=math.sqrt(ss_within / chi2.ppf(1 - alpha / 2, df_w)),
        within_high=math.sqrt(ss_within / chi2.ppf(alpha / 2, df_w)),
        server_means_sd=means_sd,
        server_means_low=math.sqrt(means_sd**2 * df_b / chi2.ppf(1 - alpha / 2, df_b)),
        server_means_high=math.sqrt(means_sd**2 * df_b / chi2.ppf(alpha / 2, df_b)),
        f_p_value=float(f.sf(f_value, df_b, df_w)) if math.isfinite(f_value) else 0.0,
    )


def speedup_interval(
    candidate: Sequence[float],
    base: Sequence[float],
    *,
    spread: Spread,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """Interval of ``candidate``'s TPS over ``base``'s (1.10: 10 % faster).

    The value is the ratio of the geometric means; the interval is a
    t-interval on the difference of mean log TPS with the pooled ``spread``
    (so one figure a side still gets an honest, wide interval).
    """
    _check_confidence(confidence)
    if not candidate or not base:
        raise MeasurementError("speedup_interval: each side needs at least one TPS figure")
    difference = statistics.fmean(map(_log_tps, candidate)) - statistics.fmean(map(_log_tps, base))
    quantile = _two_sided_quantile(confidence, spread.df)
    half = quantile * spread.relative * math.sqrt(1.0 / len(candidate) + 1.0 / len(base))
    return Interval(
        value=math.exp(difference),
        low=math.exp(difference - half),
        high=math.exp(difference + half),
        confidence=confidence,
        method=(
            f"ratio of geometric means, {len(candidate)} against {len(base)} fresh servers, "
            f"t-interval with between-server spread {spread.relative:.1%} on {spread.df:g} df"
        ),
        samples=len(candidate) + len(base),
    )


def tps_interval(figures: Sequence[float], *, spread: Spread, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """A configuration's TPS from its fresh-server ``figures``: geometric mean, t-interval on ``spread``."""
    _check_confidence(confidence)
    if not figures:
        raise MeasurementError("tps_interval: at least one TPS figure is needed")
    mean = statistics.fmean(map(_log_tps, figures))
    return _log_t_interval(
        mean,
        spread.relative / math.sqrt(len(figures)),
        df=spread.df,
        confidence=confidence,
        method=(
            f"geometric mean of {len(figures)} fresh server(s), t-interval with between-server "
            f"spread {spread.relative:.1%} on {spread.df:g} df"
        ),
        samples=len(figures),
    )


def blocked_spread(races: Sequence[Sequence[Sequence[float]]], *, prior: float, prior_df: float = 2.0) -> Spread:
    """The between-server spread from interleaved rounds, with each round's drift taken out.

    ``races``: per race, its complete rounds, each round the TPS figures of
    the same configurations (contender, incumbent, base; the order they ran
    in may turn from round to round, the columns may not), measured one after
    another in fresh servers. Log TPS is fitted as
    configuration effect + round effect (a two-way additive model, one
    block per round), so a machine that got busier between two rounds moves
    every figure of the later round alike and does not count as spread.
    A race of m configurations over n rounds adds (m - 1)(n - 1) degrees of
    freedom; ``prior`` counts as ``prior_df`` more.
    """
    if prior <= 0 or prior_df < 0:
        raise MeasurementError(f"blocked_spread: prior must be > 0 and prior_df >= 0, not {prior}, {prior_df}")
    squares = prior * prior * prior_df
    measured = 0
    for rounds in races:
        rows = [[_log_tps(v) for v in row] for row in rounds]
        if len(rows) < 2:
            continue
        width = len(rows[0])
        if width < 2 or any(len(row) != width for row in rows):
            raise MeasurementError("blocked_spread: every round of a race needs the same configurations")
        grand = statistics.fmean(x for row in rows for x in row)
        row_means = [statistics.fmean(row) for row in rows]
        column_means = [statistics.fmean(row[k] for row in rows) for k in range(width)]
        squares += sum(
            (x - row_means[i] - column_means[k] + grand) ** 2 for i, row in enumerate(rows) for k, x in enumerate(row)
        )
        measured += (width - 1) * (len(rows) - 1)
    df = prior_df + measured
    if df <= 0:
        raise MeasurementError("blocked_spread: no complete rounds and no prior weight")
    return Spread(
        relative=math.sqrt(squares / df),
        df=df,
        measured_df=measured,
        method=(
            f"SD of log TPS within interleaved rounds (round drift removed), {measured} df"
            f" and a prior of {prior:.3f} weighted as {prior_df:g}"
        ),
    )


def paired_speedup_interval(
    pairs: Sequence[tuple[float, float]], *, spread: Spread, confidence: float = DEFAULT_CONFIDENCE
) -> Interval:
    """Interval of a configuration's TPS over another's from figures measured side by side.

    ``pairs``: (candidate, reference) TPS of the same round, in adjacent
    fresh servers. The value is exp(mean log ratio); the interval is a
    t-interval with the per-server ``spread`` (a ratio of two servers has
    sqrt(2) times its SD) on ``spread.df`` degrees of freedom.
    """
    _check_confidence(confidence)
    if not pairs:
        raise MeasurementError("paired_speedup_interval: at least one pair is needed")
    differences = [_log_tps(a) - _log_tps(b) for a, b in pairs]
    return _log_t_interval(
        statistics.fmean(differences),
        spread.relative * math.sqrt(2.0 / len(differences)),
        df=spread.df,
        confidence=confidence,
        method=(
            f"mean log ratio over {len(differences)} interleaved pair(s) in fresh servers, "
            f"t-interval with between-server spread {spread.relative:.1%} on {spread.df:g} df"
        ),
        samples=2 * len(differences),
    )


def ratio_interval(ratios: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """A t-interval of the geometric mean of ``ratios`` on their own spread (at least 2 ratios).

    The log ratios are treated as a sample: exp(mean +- t_{n-1} * sd / sqrt(n)).
    """
    if any(not r > 0 or not math.isfinite(r) for r in ratios):
        raise MeasurementError(f"ratio_interval: every ratio must be positive and finite, not {list(ratios)}")
    return _own_spread_interval([math.log(r) for r in ratios], confidence=confidence)


def paired_ratio_interval(pairs: Sequence[tuple[float, float]], *, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """A paired t-interval of a / b from (a, b) TPS pairs, on the pairs' own spread (at least 2 pairs)."""
    return _own_spread_interval([_log_tps(a) - _log_tps(b) for a, b in pairs], confidence=confidence)


def screen_floor(incumbent_screens: Sequence[float], *, spread: float) -> float:
    """The screen TPS below which a new configuration is very unlikely to beat the incumbent in full.

    The geometric mean of the incumbent's screen figures, less
    ``SCREEN_FLOOR_ERRORS`` standard errors of a difference of two single
    figures at the between-server ``spread`` (SD of log TPS):
    exp(mean log - 2 * spread * sqrt(2)).
    """
    if not incumbent_screens:
        raise MeasurementError("screen_floor: the incumbent needs at least one screen figure")
    mean_log = sum(map(_log_tps, incumbent_screens)) / len(incumbent_screens)
    return math.exp(mean_log - SCREEN_FLOOR_ERRORS * spread * math.sqrt(2.0))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t on ``df`` degrees of freedom (scipy; +-inf when ``df`` <= 0)."""
    if not 0.0 <= p <= 1.0:
        raise MeasurementError(f"t_quantile: p must be in [0, 1], not {p}")
    if not df > 0:
        return math.inf if p > 0.5 else (-math.inf if p < 0.5 else 0.0)
    from scipy.stats import t as student_t  # a dependency already (Optuna's GP sampler)

    return float(student_t.ppf(p, df))


def t_cdf(x: float, df: float) -> float:
    """P(T <= ``x``) for Student's t on ``df`` > 0 degrees of freedom (scipy)."""
    if not df > 0:
        raise MeasurementError(f"t_cdf: df must be > 0, not {df}")
    from scipy.stats import t as student_t

    return float(student_t.cdf(x, df))


def _two_sided_quantile(confidence: float, df: float) -> float:
    """t quantile at the upper end of a two-sided ``confidence`` interval."""
    return t_quantile(1.0 - (1.0 - confidence) / 2.0, df)


def _own_spread_interval(logs: Sequence[float], *, confidence: float) -> Interval:
    """exp(mean +- t_{n-1} * sd / sqrt(n)) of log ratios ``logs``, on their own SD."""
    _check_confidence(confidence)
    if len(logs) < 2:
        raise MeasurementError(f"a ratio interval on its own spread needs at least 2 pairs, not {len(logs)}")
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = _two_sided_quantile(confidence, len(logs) - 1) * sd / math.sqrt(len(logs))
    return Interval(
        value=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        confidence=confidence,
        method=f"paired t-interval of the log ratio over {len(logs)} pairs ({len(logs) - 1} df)",
        samples=2 * len(logs),
    )


def _log_t_interval(
    mean_log: float, standard_error: float, *, df: float, confidence: float, method: str, samples: int
) -> Interval:
    """exp(mean_log +- t_df * standard_error): a t-interval made on the log scale."""
    half = _two_sided_quantile(confidence, df) * standard_error
    return Interval(
        value=math.exp(mean_log),
        low=math.exp(mean_log - half),
        high=math.exp(mean_log + half),
        confidence=confidence,
        method=method,
        samples=samples,
    )


def _log_tps(value: float) -> float:
    if not value > 0 or not math.isfinite(value):
        raise MeasurementError(f"a TPS figure must be positive and finite, not {value}")
    return math.log(value)


def _quantile(ordered: Sequence[float], probability: float) -> float:
    position = probability * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _check_confidence(confidence: float) -> None:
    if not 0.5 < confidence < 1.0:
        raise MeasurementError(f"confidence must be in (0.5, 1), not {confidence}")
