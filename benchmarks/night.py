"""A night of GPU time: how many confirmed answers each race design gets, what each costs, how wide the claim is.

Issue 37's question, from the measured phase times and the nested noise model, without a server:
a whole study (one night) is simulated server by server, for today's confirmation races and three
candidate designs, on the same seeds, the same landscapes and the same night budget.

**The machine.** One GPU; every server and run is sequential, so a night's GPU seconds are the sum
of its phase times: a trial's server pays ``start + ppl + bridge + run`` (PPL only for a trial's own
server: race servers reuse it), a race server ``start + bridge + m * run``. A step that would pass the
night's budget is not started: the night ends there (a race cut off is undecided). The log TPS of run
j in server i of configuration c, ended at time t, is

    log truth(c) + b_i + w_ij + drift(t)

with ``b_i`` drawn once per fresh server (SD ``--sd-between``), ``w_ij`` per run (SD
``--sd-within``), ``drift`` a Brownian random walk in time (SD ``--drift-per-hour`` per sqrt(hour),
0 allowed); ``--tail-df 3`` draws b and w from a Student-t scaled to the same SD (default normal).

**The landscape and the sampler.** Eight configurations (c = 0, the base, to 7): ``null``, all as
fast as the base; ``alt``, one 1.25x and one 1.10x (drawn per night), the rest 1.0x, as in
benchmarks/claim_error.py. Trial 0 is the base; each later trial draws a configuration not measured
yet, uniformly, from 1-7, and once all are seen any of 1-7 uniformly. A draw of the incumbent's own
configuration adds its figure to the incumbent's (no race, as ``standing`` groups same parameters);
any other draw is a new contender (a configuration of a wider space with that speed): a real
sampler is smarter, and the night would hold more distinct configurations than eight.

**The designs.**

* ``today``: sweeper/study/_race_decision.py as it stands, with ``ConfirmSettings`` as ``sweeper run``
  sets it (rounds ``CONFIRM_ROUNDS`` = 6 and prior spread 0.10 for A10G, the demo's
  ``DEMO_CONFIRM_ROUNDS`` = 4 and ``GPU_DEMO_NOISE`` for the H200 demo; screen 1 SE). A contender
  within ``screen`` standard errors of the incumbent (its first figure against all the
  incumbent's, ``speedup_interval``'s form) is raced; a round is a fresh server each for
  contender, incumbent and the base (when the incumbent is another configuration), A B C / C B A.
  Each look is the study's own ``look`` (``sweeper.study``, the rule ``_judge_race`` applies):
  from round 2 a one-sided lower bound at ``race_confidence`` above 1 against the incumbent and
  the base makes it the incumbent; at any round a two-sided upper bound below 1 (slower) or a
  mean ratio <= 1 (behind) ends the race; after ``rounds`` a tie
  (the incumbent stays: it is never farther from the base manifest here). The spread is
  ``_Replay.spread_until``'s: the rounds' two-way (``blocked_spread``) spread with the prior as 2 df,
  floored by all servers' ``pooled_spread`` while the rounds have fewer than 12 df. The claim is
  the incumbent's rounds paired with the base's after its selection, at ``claim_confidence``
  (Bonferroni over the races run); claim rounds (incumbent and base) follow while it includes 1,
  reads faster and fewer than ``rounds`` ran.
* ``repeats-m``: as today, but each race (and claim) server runs m TPS runs and reads their mean;
  the unit of the intervals is still the server (between-server variance included).
* ``warm-pair``: a race keeps its lineup's servers alive together (co-resident: every start
  paid, then the runs alternate A B B A ...) for ``--warm-k`` rounds, then replaces them all by
  fresh ones (a *set*); no decision before 2 sets, at most ``rounds`` sets. The unit is the set: its
  mean log ratio; the spread is the sets' two-way spread over the night (prior as 2 df), floored
  while it has fewer than 12 df by the night-wide one-way ANOVA of all race servers' repeats
  (sqrt(sd_between^2 + sd_within^2 / k) estimated: the between-server part is in).
* ``pooled-base``: the base is measured on its own schedule, a fresh base server after every
  ``--base-every`` - 1 other servers through the night; a race round starts only the contender (and
  the incumbent when it is not the base). The contender (and the claim's incumbent) is compared
  with the base through each of its servers' two base servers nearest in time (a drift-adjusted
  reference); the standard error is s * sqrt(1/n + sum w_j^2), w_j the weight of base server j in
  the references, so both sides' between-server variance is in. s pools the successive differences
  of the base series (each var 2 s^2 + drift), the contender/incumbent rounds' two-way spread, and
  the prior as 2 df.

**What it counts (per night).** Confirmed answers: races that end "faster" with a configuration truly
faster than the base; decided races: "faster" or ruled out (slower or behind); the night's GPU hours
over its confirmed answers (all alt nights pooled); the final claim's interval width, high / low - 1
(the median over alt nights whose incumbent is not the base); whether the final claim says
"faster" (on null nights: a false claim, with a 95 % Clopper-Pearson interval).

Simplifications: no PPL gate (every configuration passes), no failed servers, no scheduling gaps;
a night is one study; co-resident servers read as if alone; the tie-break by distance to the base
manifest always keeps the incumbent.

How to read it: each row is a design on the same alt nights (and the same null nights). A design
beats today where it gets more confirmed answers per night (or fewer GPU hours per confirmed claim)
at a claim interval no wider, and its false "faster" share on null nights stays at most 5 %.

**Fresh against warm starts (``--starts``, issue 46).** Today's races only, in three
``sweeper.serving.WarmStarts`` modes on the same nights: ``OFF`` (``--fresh-servers``: every server a
new process), ``SEARCH`` (the default: the searched trials forked from a warm launcher, the race
servers, whose readings make the claim, fresh) and ``ALL`` (every server warm). Here the product
decides: after each trial, ``sweeper.study.standing`` over the trials so far (as synthetic stored
records) names the race or claim round to run next, as ``run_study`` queues it; otherwise a searched
trial is drawn as above. The study ends at ``n_trials`` searched trials with no race waiting, or at
the first server that would pass the budget. A server costs its start (``StartPhases``: imports,
engine start, weights, compile from the cache or cold, CUDA graphs, the rest of the engine's
initialisation, the API; fresh or warm), its PPL (a configuration's first server only: sweeper
reuses a known PPL), the warm-up bridge and one TPS run. A configuration new to the night compiles
cold at ``--new-compile-share`` (the base's first server always does); a race server re-measures a
compiled one. A warm server reads as a fresh one (the question ``benchmarks/warm_start.py``
answers). Settings (``START_SETTINGS``, each printing what it assumes): ``gpu-demo`` (``sweeper run
--gpus 0 --n-trials 3`` on an H100, its fresh and warm phases as measured on one lease; a parameter,
``--fresh-phases``, ``--warm-phases``), ``a10g-e4b`` (an 8 h night on gemma-4-E4B-it at 128 x 512) and
``a10g-e4b-close`` (the same with gains of 6 % and 3 % left to find). Per mode: the GPU time, the
servers (searched + race), the confirmed answers, the morning claim's width, and the regret,
1 - the morning answer's true TPS over the best feasible configuration's (median, 10th and 90th
percentile over nights, and the mean).

    python -m benchmarks.night --setting a10g --studies 200 --seed 1
    python -m benchmarks.night --setting h200 --studies 200 --seed 1
    python -m benchmarks.night --quick --designs today,pooled-base
    python -m benchmarks.night --starts gpu-demo,a10g-e4b,a10g-e4b-close --studies 200 --seed 1
    python -m benchmarks.night --starts gpu-demo --warm-phases imports=0,engine_start=5 --studies 200
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import shlex
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

from evaluators import Interval, t_quantile
from storage import TrialRecord
from storage.testing import trial_record
from sweeper.measure import starts_warm
from sweeper.serving import DEFAULT_WARM_STARTS, WarmStarts
from sweeper.study import (
    DEFAULT_NOISE,
    FUTILITY_RATIO,
    ROUNDS_DF_ENOUGH,
    Claim,
    Configuration,
    ConfirmSettings,
    Outcome,
    Standing,
    claim_confidence,
    confirmation_role,
    is_confirmation,
    look,
    race_confidence,
    standing,
)
from sweeper.sweep import (
    CONFIRM_ROUNDS,
    DEMO_CONFIRM_ROUNDS,
    GPU_DEMO_NOISE,
    RunPlan,
)

CONFIGURATIONS = 8  # c = 0 (the base) to 7
FAST, FASTER = 1.10, 1.25  # the alt landscape's two faster configurations
LANDSCAPES = ("alt", "null")
DESIGNS = ("today", "repeats-2", "repeats-3", "warm-pair", "pooled-base")
BASE = 0  # the base's identity (and configuration)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Noise:
    """The nested noise model of log TPS (SDs; drift per sqrt(hour))."""

    sd_between: float
    sd_within: float
    drift_per_hour: float
    tail_df: float | None = None  # None: normal; else Student-t scaled to the same SD


@dataclasses.dataclass(frozen=True, kw_only=True)
class Phases:
    """Seconds of GPU time per phase, and the night's budget."""

    budget_s: float
    start_s: float
    ppl_s: float
    bridge_s: float
    run_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
    name: str
    noise: Noise
    phases: Phases
    rounds: int  # a race's rounds (ConfirmSettings.rounds, as sweeper run sets them)
    prior_spread: float


SETTINGS = {
    # a run on one's own manifest at 128 x 512 on an A10G (about 500 tok/s)
    "a10g": Setting(
        name="a10g",
        noise=Noise(sd_between=0.08, sd_within=0.05, drift_per_hour=0.03),
        phases=Phases(budget_s=8 * 3600.0, start_s=167.0, ppl_s=20.0, bridge_s=10.0, run_s=131.0),
        rounds=CONFIRM_ROUNDS,
        prior_spread=DEFAULT_NOISE,
    ),
    # the GPU demo on an H200 (8 x 128)
    "h200": Setting(
        name="h200",
        noise=Noise(sd_between=0.12, sd_within=0.07, drift_per_hour=0.05),
        phases=Phases(budget_s=3600.0, start_s=100.0, ppl_s=3.0, bridge_s=2.0, run_s=1.5),
        rounds=DEMO_CONFIRM_ROUNDS,
        prior_spread=GPU_DEMO_NOISE,
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Design:
    """``kind``: today | repeats | warm-pair | pooled-base."""

    name: str
    kind: str
    runs: int = 1  # TPS runs per race server (repeats-m)
    warm_k: int = 3  # measurement rounds per set of live servers (warm-pair)
    base_every: int = 4  # a base server every this many servers (pooled-base)


def parse_design(name: str, *, warm_k: int = 3, base_every: int = 4) -> Design:
    if name == "today":
        return Design(name=name, kind="today")
    if name.startswith("repeats-") and name[len("repeats-") :].isdigit() and int(name[len("repeats-") :]) >= 1:
        return Design(name=name, kind="repeats", runs=int(name[len("repeats-") :]))
    if name == "warm-pair":
        return Design(name=name, kind="warm-pair", warm_k=warm_k)
    if name == "pooled-base":
        return Design(name=name, kind="pooled-base", base_every=base_every)
    raise ValueError(f"unknown design {name!r}: choose from {', '.join(DESIGNS)} (repeats-m for any m >= 1)")


# -- statistics ---------------------------------------------------------------------------------
# evaluators' spreads as running sums of squares: a night looks thousands of times, and
# tests/benchmarks/test_night.py checks these against evaluators.blocked_spread / pooled_spread


@functools.lru_cache(maxsize=4096)
def _t(p: float, df: float) -> float:
    return t_quantile(p, df)


@dataclasses.dataclass(frozen=True)
class Spread:
    relative: float  # SD of one server's log reading
    df: float


@dataclasses.dataclass(frozen=True)
class Ratio:
    """An interval of a speedup (ratio units)."""

    value: float
    low: float
    high: float

    @property
    def width(self) -> float:
        return self.high / self.low - 1.0

    def interval(self, confidence: float, samples: int) -> Interval:
        """The same interval as the study's decisions take it."""
        return Interval(
            value=self.value, low=self.low, high=self.high, confidence=confidence, method="night", samples=samples
        )


def log_interval(mean: float, se: float, df: float, confidence: float) -> Ratio:
    half = _t(1.0 - (1.0 - confidence) / 2.0, df) * se
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def paired_interval(pairs: Sequence[tuple[float, float]], spread: Spread, confidence: float) -> Ratio:
    """``evaluators.paired_speedup_interval`` on log readings: mean log ratio, SE spread * sqrt(2 / n)."""
    diffs = [a - b for a, b in pairs]
    return log_interval(statistics.fmean(diffs), spread.relative * math.sqrt(2.0 / len(diffs)), spread.df, confidence)


def blocked(races: Sequence[Sequence[Sequence[float]]]) -> tuple[float, int]:
    """``evaluators.blocked_spread``'s sum of squares and df (no prior) over rows of log readings."""
    squares, df = 0.0, 0
    for rows in races:
        if len(rows) < 2:
            continue
        width = len(rows[0])
        grand = sum(map(sum, rows)) / (width * len(rows))
        row_means = [sum(r) / width for r in rows]
        col_means = [sum(r[k] for r in rows) / len(rows) for k in range(width)]
        squares += sum(
            (x - row_means[i] - col_means[k] + grand) ** 2 for i, r in enumerate(rows) for k, x in enumerate(r)
        )
        df += (width - 1) * (len(rows) - 1)
    return squares, df


def pooled(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """``evaluators.pooled_spread``'s sum of squares and df (no prior) over groups of log readings."""
    squares, df = 0.0, 0
    for g in groups:
        if len(g) > 1:
            mean = sum(g) / len(g)
            squares += sum((x - mean) ** 2 for x in g)
            df += len(g) - 1
    return squares, df


def binomial_interval(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a share."""
    from scipy.stats import beta

    if n == 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    low = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return low, high


# -- the machine --------------------------------------------------------------------------------


@dataclasses.dataclass
class Server:
    ident: int  # the configuration's identity (0: the base)
    level: float  # log truth + b
    runs: list[float] = dataclasses.field(default_factory=list)  # log readings
    times: list[float] = dataclasses.field(default_factory=list)  # when each run ended (s)

    @property
    def reading(self) -> float:
        return sum(self.runs) / len(self.runs)

    @property
    def time(self) -> float:
        return self.times[-1]


class Machine:
    """One GPU: the clock is the GPU time spent; servers and runs draw the nested noise."""

    def __init__(self, noise: Noise, phases: Phases, seed: int) -> None:
        self.noise, self.phases = noise, phases
        self.rng_between = np.random.default_rng([seed, 3])
        self.rng_within = np.random.default_rng([seed, 4])
        self.rng_drift = np.random.default_rng([seed, 5])
        self.clock = 0.0
        self.drift = 0.0
        self.drift_at = 0.0
        self.servers: list[Server] = []

    def fits(self, seconds: float) -> bool:
        return self.clock + seconds <= self.phases.budget_s + 1e-9

    def server_cost(self, *, ppl: bool = False, runs: int = 1) -> float:
        p = self.phases
        return p.start_s + (p.ppl_s if ppl else 0.0) + p.bridge_s + runs * p.run_s

    def _draw(self, rng: np.random.Generator, sd: float) -> float:
        df = self.noise.tail_df
        if df is None:
            return sd * float(rng.standard_normal())
        return sd * float(rng.standard_t(df)) / math.sqrt(df / (df - 2.0))

    def start(self, ident: int, log_truth: float, *, ppl: bool = False, start_s: float | None = None) -> Server:
        """A fresh server: start (``start_s``, default the phases') + PPL for a trial's own server + warm-up bridge."""
        start_s = self.phases.start_s if start_s is None else start_s
        self.clock += start_s + (self.phases.ppl_s if ppl else 0.0) + self.phases.bridge_s
        server = Server(ident=ident, level=log_truth + self._draw(self.rng_between, self.noise.sd_between))
        self.servers.append(server)
        return server

    def run(self, server: Server) -> float:
        """One TPS run in a live server: its log reading."""
        self.clock += self.phases.run_s
        step = self.clock - self.drift_at
        if self.noise.drift_per_hour > 0 and step > 0:
            self.drift += self.noise.drift_per_hour * math.sqrt(step / 3600.0) * float(self.rng_drift.standard_normal())
        self.drift_at = self.clock
        value = server.level + self._draw(self.rng_within, self.noise.sd_within) + self.drift
        server.runs.append(value)
        server.times.append(self.clock)
        return value


def truth(landscape: str, seed: int, speeds: tuple[float, float] = (FASTER, FAST)) -> dict[int, float]:
    """Each configuration's true TPS over the base's; on ``alt`` the 1.25x and 1.10x (``speeds``) are
    drawn per night."""
    ratios = {c: 1.0 for c in range(CONFIGURATIONS)}
    if landscape == "alt":
        faster, fast = np.random.default_rng([seed, 1]).choice(np.arange(1, CONFIGURATIONS), 2, replace=False)
        ratios[int(faster)], ratios[int(fast)] = speeds
    return ratios


# -- one night ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class NightResult:
    design: str
    landscape: str
    seed: int
    gpu_s: float
    race_gpu_s: float  # of races and claim rounds (pooled-base: and every base server after trial 0)
    first_confirmed_s: float | None  # GPU seconds into the night when the first confirmed answer came
    trials: int
    races: int
    confirmed: int  # races ending "faster" with a configuration truly faster than the base
    wrong_faster: int  # races ending "faster" with one no faster than the base
    decided: int  # races ending faster, slower or behind
    claim: str  # faster | indistinct | slower | base
    claimed_ratio: float  # the incumbent's true speedup over the base
    low: float | None
    high: float | None
    round_errors: tuple[float, ...]  # each race round's contender/incumbent log ratio less the true one

    @property
    def width(self) -> float | None:
        return None if self.low is None or self.high is None else self.high / self.low - 1.0


class Night:
    """One study over one night's budget under one design."""

    def __init__(self, setting: Setting, design: Design, landscape: str, seed: int) -> None:
        self.setting, self.design, self.landscape, self.seed = setting, design, landscape, seed
        self.confirm = ConfirmSettings(rounds=setting.rounds, noise=setting.prior_spread)
        self.machine = Machine(setting.noise, setting.phases, seed)
        self.classes = truth(landscape, seed)
        self.sampler = np.random.default_rng([seed, 2])
        self.log_truth: dict[int, float] = {BASE: 0.0}
        self.ratio: dict[int, float] = {BASE: 1.0}
        self.figures: dict[int, list[float]] = {BASE: []}  # each configuration's server readings
        self.race_rows: list[list[tuple[float, ...]]] = []  # per race (and claim series): its rounds / sets
        self.claim_rows: dict[int, list[tuple[float, ...]]] = {}
        self.claims_done: dict[int, int] = {}
        self.with_base: dict[int, list[tuple[float, float]]] = {}  # (its reading, the base's) of a round
        self.repeat_servers: list[Server] = []  # servers with several runs (warm-pair's ANOVA floor)
        self.base_series: list[Server] = []  # pooled-base: every base server, in time
        self.post: dict[int, list[Server]] = {}  # pooled-base: each configuration's servers after selection
        self.since_base = 0
        self.race_gpu = 0.0  # GPU seconds of races and claim rounds (and pooled-base's base schedule)
        self.in_race = False
        self.first_confirmed: float | None = None  # GPU seconds into the night of the first confirmed answer
        self.round_errors: list[float] = []
        self.next_ident = 1
        self.unseen = list(range(1, CONFIGURATIONS))

    # -- servers ---------------------------------------------------------------------------------

    def measure(self, ident: int, runs: int = 1, *, ppl: bool = False) -> Server:
        server = self.machine.start(ident, self.log_truth[ident], ppl=ppl)
        for _ in range(runs):
            self.machine.run(server)
        if ident == BASE:
            self.base_series.append(server)
            self.since_base = 0
        else:
            self.since_base += 1
        return server

    def base_due(self) -> bool:
        """pooled-base: a base server is due after this many others."""
        return self.design.kind == "pooled-base" and self.since_base >= self.design.base_every - 1

    def scheduled_base(self) -> bool:
        """pooled-base: measure the base when due; False when the night has no room for it."""
        if not self.base_due():
            return True
        if not self.machine.fits(self.machine.server_cost()):
            return False
        before = self.machine.clock
        self.figures[BASE].append(self.measure(BASE).reading)
        if not self.in_race:  # the base's own schedule serves the races: its cost is theirs
            self.race_gpu += self.machine.clock - before
        return True

    # -- spreads ----------------------------------------------------------------------------------

    def spread(self) -> Spread:
        prior, prior_df = self.confirm.noise, self.confirm.prior_df
        kind = self.design.kind
        rows_sq, rows_df = blocked([r for r in self.race_rows if r])
        if kind == "pooled-base":
            squares, df = rows_sq, rows_df
            base = [s.reading for s in self.base_series]
            squares += sum((b - a) ** 2 for a, b in zip(base, base[1:])) / 2.0
            df += max(len(base) - 1, 0)
            return Spread(math.sqrt((squares + prior * prior * prior_df) / (df + prior_df)), df + prior_df)
        rounds = Spread(math.sqrt((rows_sq + prior * prior * prior_df) / (rows_df + prior_df)), rows_df + prior_df)
        if rows_df >= ROUNDS_DF_ENOUGH:
            return rounds
        if kind == "warm-pair":
            floor = self.anova_floor()
            if floor is None:
                return rounds
            return Spread(
                max(rounds.relative, floor.relative), floor.df if floor.relative > rounds.relative else rounds.df
            )
        all_sq, all_df = pooled(list(self.figures.values()))
        everything = Spread(math.sqrt((all_sq + prior * prior * prior_df) / (all_df + prior_df)), all_df + prior_df)
        if rounds.relative > everything.relative:
            return Spread(rounds.relative, everything.df)
        return everything

    def anova_floor(self) -> Spread | None:
        """warm-pair: sqrt(sd_between^2 + sd_within^2 / k) from every race server's repeats, night-wide
        (one-way random effects, servers within configurations; drift between sets counts as between)."""
        k = self.design.warm_k
        by_config: dict[int, list[Server]] = {}
        for s in self.repeat_servers:
            by_config.setdefault(s.ident, []).append(s)
        ss_w = df_w = 0.0
        ss_b = df_b = 0.0
        for servers in by_config.values():
            means = [s.reading for s in servers]
            for s, m in zip(servers, means):
                ss_w += sum((x - m) ** 2 for x in s.runs)
                df_w += len(s.runs) - 1
            if len(servers) > 1:
                grand = sum(means) / len(means)
                ss_b += k * sum((m - grand) ** 2 for m in means)
                df_b += len(servers) - 1
        if df_b < 1 or df_w < 1:
            return None
        return Spread(math.sqrt(max(ss_b / df_b, ss_w / df_w) / k), df_b)

    # -- the comparisons ---------------------------------------------------------------------------

    def versus_base(self, ident: int, spread: Spread, confidence: float) -> Ratio | None:
        """pooled-base: ``ident``'s servers after selection against the two base servers nearest each."""
        servers = self.post.get(ident, [])
        bases = self.base_series
        if not servers or len(bases) < 2:
            return None
        weights: dict[int, float] = {}
        diffs = []
        times = [b.time for b in bases]
        for s in servers:
            nearest = sorted(range(len(bases)), key=lambda j: (abs(times[j] - s.time), j))[:2]
            diffs.append(s.reading - sum(bases[j].reading for j in nearest) / 2.0)
            for j in nearest:
                weights[j] = weights.get(j, 0.0) + 0.5 / len(servers)
        se = spread.relative * math.sqrt(1.0 / len(servers) + sum(w * w for w in weights.values()))
        return log_interval(statistics.fmean(diffs), se, spread.df, confidence)

    def compare(self, rows: Sequence[tuple[float, ...]], column: int, ident: int, confidence: float) -> Ratio | None:
        """Column 0 (the contender) against ``column`` of the race's rows; for pooled-base against the
        base (``column`` None in its rows), through the pooled base series."""
        spread = self.spread()
        if self.design.kind == "pooled-base" and column < 0:
            return self.versus_base(ident, spread, confidence)
        pairs = [(r[0], r[column]) for r in rows]
        return paired_interval(pairs, spread, confidence) if pairs else None

    # -- a race ------------------------------------------------------------------------------------

    def lineup(self, contender: int, incumbent: int) -> list[int]:
        line = [contender, incumbent] + ([BASE] if incumbent != BASE else [])
        if self.design.kind == "pooled-base":
            line = [i for i in line if i != BASE]
        return line

    def one_round(self, line: list[int], number: int) -> tuple[float, ...] | None:
        """One round (a set, for warm-pair) of ``line``: its readings in ``line``'s order; None: no room."""
        kind, m = self.design.kind, self.machine
        order = line if number % 2 == 1 else line[::-1]
        if kind == "warm-pair":
            k = self.design.warm_k
            if not m.fits(len(line) * m.server_cost(runs=k)):
                return None
            servers = {i: m.start(i, self.log_truth[i]) for i in order}
            for r in range(k):
                for i in order if r % 2 == 0 else order[::-1]:
                    m.run(servers[i])
            self.repeat_servers += servers.values()
            self.since_base += len(line)
            readings = {i: s.reading for i, s in servers.items()}
        elif kind == "pooled-base":
            readings = {}
            for i in order:
                if not self.scheduled_base() or not m.fits(m.server_cost()):
                    return None
                server = self.measure(i)
                readings[i] = server.reading
                self.post.setdefault(i, []).append(server)
        else:
            runs = self.design.runs
            if not m.fits(len(line) * m.server_cost(runs=runs)):
                return None
            readings = {i: self.measure(i, runs).reading for i in order}
        for i, value in readings.items():
            self.figures[i].append(value)
        row = tuple(readings[i] for i in line)
        if BASE in readings:
            for i in line:
                if i != BASE:
                    self.with_base.setdefault(i, []).append((readings[i], readings[BASE]))
        return row

    def race(self, contender: int, incumbent: int) -> Outcome | None:
        """A race over rounds run one at a time, decided at each look by the study's own rule
        (``sweeper.study.look``); the outcome, None when the night ran out."""
        rounds = self.confirm.rounds
        level, plain_level = race_confidence(self.confirm), self.confirm.confidence
        line = self.lineup(contender, incumbent)
        rows: list[tuple[float, ...]] = []
        if len(line) > 1:
            self.race_rows.append(rows)
        first_look = 2 if self.design.kind == "warm-pair" else 1
        for n in range(1, rounds + 1):
            row = self.one_round(line, n)
            if row is None:
                return None
            if len(line) > 1:
                rows.append(row)
                self.round_errors.append(row[0] - row[1] - self.log_truth[contender] + self.log_truth[incumbent])
            if n < first_look:
                continue
            column = -1 if self.design.kind == "pooled-base" and incumbent == BASE else 1
            vs_incumbent = self.compare(rows, column, contender, level)
            plain = self.compare(rows, column, contender, plain_level)
            if vs_incumbent is None or plain is None:
                continue

            def over_base(rows: list[tuple[float, ...]] = rows) -> bool:
                if incumbent == BASE:
                    return True
                vs_base = self.compare(rows, 2 if self.design.kind != "pooled-base" else -1, contender, level)
                return vs_base is not None and vs_base.low > 1.0

            decided = look(
                n,
                self.confirm,
                vs_incumbent.interval(level, len(rows)),
                plain.interval(plain_level, len(rows)),
                over_base,
            )
            if decided is not None:
                return decided[0]
        return Outcome.TIE_UNDECIDED

    # -- the claim -----------------------------------------------------------------------------------

    def claim_interval(self, incumbent: int, races: int) -> Ratio | None:
        level = claim_confidence(self.confirm, races)
        if self.design.kind == "pooled-base":
            return self.versus_base(incumbent, self.spread(), level)
        pairs = self.with_base.get(incumbent, [])
        return paired_interval(pairs, self.spread(), level) if pairs else None

    def claim_rounds(self, incumbent: int, races: int) -> None:
        """Re-measure the incumbent beside the base while its claim includes 1 and reads faster."""
        pooled_base = self.design.kind == "pooled-base"
        rows = self.claim_rows.setdefault(incumbent, [])
        if not rows and not pooled_base:
            self.race_rows.append(rows)
        line = [incumbent] if pooled_base else [incumbent, BASE]
        while self.claims_done.get(incumbent, 0) < self.confirm.rounds:
            iv = self.claim_interval(incumbent, races)
            if iv is None or iv.low > 1.0 or iv.high < 1.0 or iv.value <= FUTILITY_RATIO:
                return
            row = self.one_round(line, self.claims_done.get(incumbent, 0) + 1)
            if row is None:
                return
            self.claims_done[incumbent] = self.claims_done.get(incumbent, 0) + 1
            if not pooled_base:  # pooled-base: the base series carries the comparison
                rows.append(row)

    # -- the study ------------------------------------------------------------------------------------

    def draw(self) -> int:
        if self.unseen:
            return self.unseen.pop(int(self.sampler.integers(len(self.unseen))))
        return int(self.sampler.integers(1, CONFIGURATIONS))

    def screened(self, contender: int, incumbent: int) -> bool:
        """``_race_turn``'s screen: the contender's first figure against all the incumbent's."""
        spread = self.spread()
        mine, theirs = self.figures[contender], self.figures[incumbent]
        difference = statistics.fmean(mine) - statistics.fmean(theirs)
        se = spread.relative * math.sqrt(1.0 / len(mine) + 1.0 / len(theirs))
        iv = log_interval(difference, se, spread.df, self.confirm.confidence)
        return iv.high < 1.0 or difference < -self.confirm.screen * se

    def run(self) -> NightResult:
        m = self.machine
        self.figures[BASE].append(self.measure(BASE, ppl=True).reading)
        incumbent, incumbent_class, races, trials = BASE, BASE, 0, 1
        outcomes: list[tuple[int, Outcome]] = []
        while True:
            c = self.draw()
            if not self.scheduled_base() or not m.fits(m.server_cost(ppl=True)):
                break
            trials += 1
            ident = self.next_ident
            self.next_ident += 1
            self.log_truth[ident], self.ratio[ident] = math.log(self.classes[c]), self.classes[c]
            reading = self.measure(ident, ppl=True).reading
            if c == incumbent_class:  # the incumbent's own configuration again: one more figure of it
                self.figures[incumbent].append(reading)
                continue
            self.figures[ident] = [reading]
            if self.screened(ident, incumbent):
                continue
            races += 1
            before, self.in_race = m.clock, True
            outcome = self.race(ident, incumbent)
            if outcome is not None:
                outcomes.append((ident, outcome))
                if outcome is Outcome.FASTER:
                    incumbent, incumbent_class = ident, c
                    if self.ratio[ident] > 1.0 and self.first_confirmed is None:
                        self.first_confirmed = m.clock
                if incumbent != BASE:
                    self.claim_rounds(incumbent, races)
            self.race_gpu += m.clock - before
            self.in_race = False
            if outcome is None:
                break
        final = self.claim_interval(incumbent, races) if incumbent != BASE else None
        if incumbent == BASE:
            claim = "base"
        elif final is None or final.high < 1.0:
            claim = "slower" if final is not None else "indistinct"
        else:
            claim = "faster" if final.low > 1.0 else "indistinct"
        return NightResult(
            design=self.design.name,
            landscape=self.landscape,
            seed=self.seed,
            gpu_s=m.clock,
            race_gpu_s=self.race_gpu,
            first_confirmed_s=self.first_confirmed,
            trials=trials,
            races=races,
            confirmed=sum(o is Outcome.FASTER and self.ratio[i] > 1.0 for i, o in outcomes),
            wrong_faster=sum(o is Outcome.FASTER and self.ratio[i] <= 1.0 for i, o in outcomes),
            decided=sum(o in (Outcome.FASTER, Outcome.SLOWER, Outcome.BEHIND) for _, o in outcomes),
            claim=claim,
            claimed_ratio=self.ratio[incumbent],
            low=None if final is None else final.low,
            high=None if final is None else final.high,
            round_errors=tuple(self.round_errors),
        )


def night_seed(seed: int, landscape: str, index: int) -> int:
    return 1_000_000 * seed + 100_000 * LANDSCAPES.index(landscape) + index


def simulate(setting: Setting, design: Design, landscape: str, studies: int, seed: int) -> list[NightResult]:
    return [Night(setting, design, landscape, night_seed(seed, landscape, i)).run() for i in range(studies)]


# -- warm starts (issue 46) ----------------------------------------------------------------------------
# a night as ``sweeper run`` runs it, every race and claim decided by the product's own ``standing``
# over the trials so far (sweeper.study's public API), each server's start charged by phase and by
# whether it starts fresh or forked from a warm launcher


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartPhases:
    """Seconds of one server's start, by phase (the phases sweeper's start split names)."""

    imports: float  # the API process's imports: exec to vLLM's banner
    engine_start: float  # banner to the engine core's first line (its process and its workers starting)
    weights: float  # loading the weights
    compile_hit: float  # the compiled graphs loaded from vLLM's compile cache
    compile_miss: float  # a cold compile: a configuration the cache has not seen (a new compile key)
    graphs: float  # CUDA-graph capture
    engine_rest: float  # the rest of the engine's initialisation (memory profile, KV cache, warm-up)
    api_ready: float  # the engine ready to the API's first answer

    def seconds(self, *, compiled: bool) -> float:
        """One start: every phase, the compile as a hit where the cache holds the configuration."""
        compile_s = self.compile_hit if compiled else self.compile_miss
        return (
            self.imports
            + self.engine_start
            + self.weights
            + compile_s
            + self.graphs
            + self.engine_rest
            + self.api_ready
        )


START_PHASES = tuple(field.name for field in dataclasses.fields(StartPhases))


def parse_phases(base: StartPhases, text: str | None) -> StartPhases:
    """``base`` with ``name=seconds,...`` overrides (``--fresh-phases``, ``--warm-phases``)."""
    if not text:
        return base
    changes = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip().replace("-", "_")
        if name not in START_PHASES or not value:
            raise ValueError(f"phase {part!r}: expected NAME=SECONDS, NAME one of {', '.join(START_PHASES)}")
        changes[name] = float(value)
    return dataclasses.replace(base, **changes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartSetting:
    """A night of ``sweeper run`` with its measuring, its start phases fresh and warm, and what it assumes."""

    name: str
    title: str
    noise: Noise
    confirm: ConfirmSettings  # the races as ``sweeper run`` sets them (``RunPlan.confirm_settings``)
    budget_s: float | None  # the night's GPU seconds (None: no limit; the study ends at n_trials)
    n_trials: int | None  # searched trials, the base's included (None: until the budget ends)
    ppl_s: float  # a configuration's PPL (its first server only: sweeper reuses a known PPL)
    bridge_s: float
    run_s: float  # one TPS run
    fresh: StartPhases
    warm: StartPhases
    # of searched trials with a new configuration, those with a compile key not compiled yet (vLLM's hash
    # covers the window and the drafter's folder for CENTROID_TOP_K; sweeper's CompileCache adds K)
    new_compile_share: float
    assumptions: tuple[str, ...]
    speeds: tuple[float, float] = (FASTER, FAST)  # the alt landscape's two faster configurations
    # a night that was measured: (how its servers started, searched trials, race servers, its seconds,
    # what it was)
    measured: tuple[WarmStarts, int, int, float, str] | None = None


def _gpu_demo_confirm() -> ConfirmSettings:
    """``sweeper run --gpus 0`` on the demo: its GPU manifest with the GPU demo's noise prior."""
    return RunPlan(manifest="manifest-gpu.json", noise=GPU_DEMO_NOISE, n_trials=3).confirm_settings()


def _own_manifest_confirm() -> ConfirmSettings:
    """``sweeper run --manifest ...`` on one's own manifest (the code's own defaults)."""
    return RunPlan(manifest="manifest.json").confirm_settings()


# the GPU demo on an H100 (2026-12-07, vLLM 0.26.0, serving code as at fcad2ba: the model-info and Triton
# caches shared, a 1 GiB KV cache): the medians of 6 fresh servers beside 6 warm ones (benchmarks/results/
# warm_start-gpu-h100-caches-2026-12-07.txt), a cold compile as the two of the GPU demo's study on that lease
# (18.5 s and 15.0 s, gpu-demo-warm-fresh-h100-2026-12-07.txt); the KV cache and the engine's warm-up in
# engine_rest
GPU_DEMO_FRESH = StartPhases(
    imports=22.5,
    engine_start=21.0,
    weights=2.0,
    compile_hit=2.0,
    compile_miss=17.0,
    graphs=2.0,
    engine_rest=1.5,
    api_ready=3.8,
)
# a warm server of the GPU demo beside those (the medians of its 6): imports 2 s, the engine's start 2 s (its
# launcher running already), api ready 1.6 s; its other phases as a fresh server's
GPU_DEMO_WARM = dataclasses.replace(GPU_DEMO_FRESH, imports=2.0, engine_start=2.0, api_ready=1.6)
# a warm server through sweeper's launcher on an H100 (2026-12-07, 9 pairs, benchmarks/results/
# warm_start-gpu-h100-env-2026-12-07.txt): the API process's imports 2 s and the engine's start 3 s
# (medians; against 21 s and 21 s fresh beside them), its engine's launcher running already (a CUDA
# build's launcher starts it with itself); the other phases as a fresh server's
GPU_WARM_IMPORTS = 2.0
GPU_WARM_ENGINE_START = 3.0
# gemma-4-E4B-it on an A10G: the imports and the engine's start as on the H100's host; ~8 GB of bf16
# weights at ~1 GB/s from local disk; a cold compile 45 s (the tiny model's new window took 20 s on an
# H200, 2026-12-01, docs/gpu.md), 5 s from the cache; CUDA graphs 20 s; memory profile, KV cache and
# warm-up 10 s; the API 8.6 s as on the H100
A10G_FRESH = StartPhases(
    imports=23.0,
    engine_start=24.0,
    weights=8.0,
    compile_hit=5.0,
    compile_miss=45.0,
    graphs=20.0,
    engine_rest=10.0,
    api_ready=8.6,
)

START_SETTINGS = {
    "gpu-demo": StartSetting(
        name="gpu-demo",
        title="the GPU demo, `sweeper run --gpus 0 --n-trials 3` (H100, tiny Gemma 4, 8 x 128)",
        noise=SETTINGS["h200"].noise,
        confirm=_gpu_demo_confirm(),
        budget_s=None,
        n_trials=3,
        ppl_s=SETTINGS["h200"].phases.ppl_s,
        bridge_s=SETTINGS["h200"].phases.bridge_s,
        run_s=SETTINGS["h200"].phases.run_s,
        fresh=GPU_DEMO_FRESH,
        warm=GPU_DEMO_WARM,
        new_compile_share=1.0,  # every searched configuration of the demo's study was new to its compile cache
        speeds=(1.5, FASTER),
        measured=(
            WarmStarts.SEARCH,
            3,
            4,
            434.0,
            "the GPU demo on an H100, 2026-12-07: 7 servers in 7 min 14 s, warm as sweeper starts them",
        ),
        assumptions=(
            "fresh start: the GPU demo's measured phases on an H100 (2026-12-07, 6 servers): imports 22.5 s, "
            "engine start 21 s, weights 2 s, compile 2 s from the cache or 17 s cold, CUDA graphs 2 s, KV cache "
            "and warm-up 1.5 s, api ready 3.8 s: 54.8 s (69.8 s cold)",
            "warm start: imports 2 s, the engine's start 2 s and api ready 1.6 s, the medians of 6 warm servers "
            "beside those, the other phases as fresh (--warm-phases); a process's first warm server waits for its "
            "launcher's imports (about 19 s, then 19-27 s of its engine's launcher), which this leaves out",
            "measuring: PPL 3 s (a configuration's first server), bridge 2 s, a TPS run 1.5 s (the h200 setting)",
            "noise: the h200 setting's between 0.12, within 0.07, drift 0.05/sqrt(h); "
            "a warm server reads as a fresh one (warm_start.py's question)",
            "the landscape: the fastest configuration 1.5x the base (the demo's re-runs read +27 % to +53 %, "
            "results/gpu-demo-claims.csv), the next 1.25x, the other five as fast as the base",
        ),
    ),
    "a10g-e4b": StartSetting(
        name="a10g-e4b",
        title="an A10G-shaped night on one's own manifest (gemma-4-E4B-it, 128 x 512)",
        noise=SETTINGS["a10g"].noise,
        confirm=_own_manifest_confirm(),
        budget_s=8 * 3600.0,
        n_trials=None,
        ppl_s=SETTINGS["a10g"].phases.ppl_s,
        bridge_s=SETTINGS["a10g"].phases.bridge_s,
        run_s=SETTINGS["a10g"].phases.run_s,
        fresh=A10G_FRESH,
        warm=dataclasses.replace(A10G_FRESH, imports=GPU_WARM_IMPORTS, engine_start=GPU_WARM_ENGINE_START),
        new_compile_share=1.0,
        assumptions=(
            "imports 23 s and engine start 24 s as measured on the H100's host (2026-12-06), the A10G host's "
            "CPU taken as fast",
            "weights 8 s (about 8 GB of bf16 weights at about 1 GB/s from local disk)",
            "compile: 45 s cold for a configuration the compile cache has not seen, 5 s from the cache; the "
            "base's first server compiles cold, and so does every searched trial of a configuration new to the "
            "night (a new window, drafter top-k or K is a new compile key; --new-compile-share); a race server "
            "re-measures a compiled configuration",
            "CUDA-graph capture 20 s; memory profile, KV cache and warm-up 10 s; api ready 8.6 s (H100)",
            "warm start: imports 2 s, engine start 3 s (as measured through sweeper's launcher on an H100)",
            "measuring: PPL 20 s (a configuration's first server), bridge 10 s, a 128 x 512 TPS run 131 s "
            "(the a10g setting); noise: between 0.08, within 0.05, drift 0.03/sqrt(h)",
        ),
    ),
}
# the same night where what is left to find is small: a tuned manifest's next 6 % and 3 %
START_SETTINGS["a10g-e4b-close"] = dataclasses.replace(
    START_SETTINGS["a10g-e4b"],
    name="a10g-e4b-close",
    title="the A10G-shaped night where the gains left are small (one configuration 1.06x, one 1.03x)",
    speeds=(1.06, 1.03),
)
MODES = (WarmStarts.OFF, WarmStarts.SEARCH, WarmStarts.ALL)


BASE_KEY = 0  # the base's compile key, shared by every configuration that brings no new one


def _record(number: int, role: str, ident: int, log_tps: float) -> TrialRecord:
    """A measured, gate-passing trial as the store would hand it to ``standing``."""
    return trial_record(
        number,
        study_name="night",
        optuna_trial_id=number,
        role=role,
        params={"configuration": f"c{ident}"},  # every other one equally far from the base: ties keep
        tps=100.0 * math.exp(log_tps),
        ppl=2.0,
        ppl_cap=2.42,
        host="night",
        pid=0,
    )


def _ident(item: Configuration | TrialRecord) -> int:
    """The configuration's identity in the night, from its params."""
    return int(str(item.params["configuration"])[1:])


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartNightResult:
    setting: str
    mode: str
    seed: int
    gpu_s: float
    start_s: float  # of it, starting servers
    searched: int  # searched trials (the base's included)
    race_servers: int  # confirmation trials (races and claim rounds)
    warm: int  # servers started warm
    compile_misses: int
    stopped: str  # n_trials | budget
    confirmed: int  # races ending "faster" with a configuration truly faster than the base
    claim: str  # the morning's claim (Claim)
    low: float | None
    high: float | None
    answer_ratio: float  # the morning answer's true TPS over the base's
    best_ratio: float  # the best feasible configuration's (every configuration passes here)

    @property
    def servers(self) -> int:
        return self.searched + self.race_servers

    @property
    def regret(self) -> float:
        """1 - the morning answer's true TPS over the best feasible configuration's."""
        return 1.0 - self.answer_ratio / self.best_ratio

    @property
    def width(self) -> float | None:
        return None if self.low is None or self.high is None else self.high / self.low - 1.0


class StartNight:
    """One study under one ``WarmStarts`` mode, as ``sweeper run`` runs it.

    The base's trial first; then, after each trial, the product's ``standing`` over the trials so far:
    the round of the race (or claim) it asks for, each configuration of its lineup in a server of its
    own, or else a searched trial (drawn as ``Night`` draws them), until ``n_trials`` searched trials
    and no race waiting, or a server that would pass the budget (not started).
    """

    def __init__(self, setting: StartSetting, mode: WarmStarts, landscape: str, seed: int) -> None:
        self.setting, self.mode, self.seed = setting, mode, seed
        budget = math.inf if setting.budget_s is None else setting.budget_s
        phases = Phases(
            budget_s=budget, start_s=0.0, ppl_s=setting.ppl_s, bridge_s=setting.bridge_s, run_s=setting.run_s
        )
        self.machine = Machine(setting.noise, phases, seed)
        self.classes = truth(landscape, seed, setting.speeds)
        self.sampler = np.random.default_rng([seed, 2])
        self.compile_draws = np.random.default_rng([seed, 6])
        self.class_of: dict[int, int] = {}
        self.key_of: dict[int, int] = {}
        self.compiled: set[int] = set()  # compile keys in the cache
        self.ppl_known: set[int] = set()
        self.records: list[TrialRecord] = []
        self.unseen = list(range(1, CONFIGURATIONS))
        self.start_s = 0.0
        self.warm = self.misses = self.searched = self.race_servers = 0
        self.keys = 0

    def configuration(self, cls: int) -> int:
        """A new configuration of class ``cls``: its identity. The base brings the first compile key;
        any other a new key at ``new_compile_share``, else one compiled already (the base's)."""
        ident = len(self.class_of)
        self.class_of[ident] = cls
        if ident != BASE and float(self.compile_draws.random()) < self.setting.new_compile_share:
            self.keys += 1
            self.key_of[ident] = self.keys
        else:
            self.key_of[ident] = BASE_KEY
        return ident

    def start_seconds(self, ident: int, role: str) -> float:
        """The start of ``ident``'s server in a trial of ``role``: warm or fresh, the compile a hit or not."""
        phases = self.setting.warm if starts_warm(self.mode, role) else self.setting.fresh
        return phases.seconds(compiled=self.key_of[ident] in self.compiled)

    def serve(self, ident: int, role: str) -> bool:
        """One trial's server and its TPS run; False (nothing started) when it would pass the budget."""
        m = self.machine
        start = self.start_seconds(ident, role)
        ppl = ident not in self.ppl_known  # sweeper reuses a configuration's PPL once measured
        if not m.fits(start + (self.setting.ppl_s if ppl else 0.0) + self.setting.bridge_s + self.setting.run_s):
            return False
        warm, compiled = starts_warm(self.mode, role), self.key_of[ident] in self.compiled
        server = m.start(ident, math.log(self.classes[self.class_of[ident]]), ppl=ppl, start_s=start)
        reading = m.run(server)
        self.ppl_known.add(ident)
        self.compiled.add(self.key_of[ident])
        self.records.append(_record(len(self.records), role, ident, reading))
        self.start_s += start
        self.warm += warm
        self.misses += not compiled
        if is_confirmation(role):
            self.race_servers += 1
        else:
            self.searched += 1
        return True

    def draw(self) -> int:
        if self.unseen:
            return self.unseen.pop(int(self.sampler.integers(len(self.unseen))))
        return int(self.sampler.integers(1, CONFIGURATIONS))

    def run(self) -> StartNightResult:
        stopped = "budget"
        if self.serve(self.configuration(BASE), "baseline"):
            while True:
                now = standing(self.records, self.setting.confirm)
                if now.race is not None:
                    if not all(self.serve(_ident(c), now.race.role) for c in now.race.lineup()):
                        break
                    continue
                if self.setting.n_trials is not None and self.searched >= self.setting.n_trials:
                    stopped = "n_trials"
                    break
                cls = self.draw()
                assert now.incumbent is not None  # the base's trial is in: something stands
                incumbent = _ident(now.incumbent)
                # the incumbent's own configuration proposed again: one more figure of it
                ident = incumbent if cls == self.class_of[incumbent] else self.configuration(cls)
                if not self.serve(ident, "sampled"):
                    break
        return self.result(standing(self.records, self.setting.confirm), stopped)

    def result(self, final: Standing, stopped: str) -> StartNightResult:
        ratio = {ident: self.classes[cls] for ident, cls in self.class_of.items()}
        by_trial = {r.number: _ident(r) for r in self.records}
        speedup = final.speedup
        return StartNightResult(
            setting=self.setting.name,
            mode=self.mode.value,
            seed=self.seed,
            gpu_s=self.machine.clock,
            start_s=self.start_s,
            searched=self.searched,
            race_servers=self.race_servers,
            warm=self.warm,
            compile_misses=self.misses,
            stopped=stopped,
            confirmed=sum(d.outcome is Outcome.FASTER and ratio[by_trial[d.contender]] > 1.0 for d in final.decisions),
            claim=str(final.claim),
            low=None if speedup is None else speedup.low,
            high=None if speedup is None else speedup.high,
            answer_ratio=ratio[_ident(final.incumbent)] if final.incumbent is not None else 1.0,
            best_ratio=max(self.classes.values()),
        )


def composition_seconds(setting: StartSetting, mode: WarmStarts, searched: int, race: int) -> float:
    """GPU seconds of a night of ``searched`` trials, the base's first (each a configuration new to
    it: its PPL, a cold compile), and ``race`` race servers (compiled configurations), under ``mode``."""

    def start(role: str, *, compiled: bool) -> float:
        return (setting.warm if starts_warm(mode, role) else setting.fresh).seconds(compiled=compiled)

    measure = setting.bridge_s + setting.run_s
    first = start("baseline", compiled=False) + setting.ppl_s + measure
    search = start("sampled", compiled=False) + setting.ppl_s + measure
    return first + (searched - 1) * search + race * (start(confirmation_role(1, 1), compiled=True) + measure)


def measured_line(setting: StartSetting, measured: tuple[WarmStarts, int, int, float, str]) -> str:
    """A measured night's servers at ``setting``'s phases in every mode, beside the time it took."""
    measured_mode, searched, race, seconds, what = measured
    fresh = composition_seconds(setting, WarmStarts.OFF, searched, race)
    parts = []
    for mode in MODES:
        t = composition_seconds(setting, mode, searched, race)
        label = "fresh" if mode is WarmStarts.OFF else mode.value.upper()
        notes = ([] if mode is WarmStarts.OFF else [f"{t / fresh:.2f}"]) + (
            [f"measured {_duration(seconds)}"] if mode is measured_mode else []
        )
        parts.append(f"{label} {_duration(t)}" + (f" ({'; '.join(notes)})" if notes else ""))
    return f"the measured night's servers ({searched} searched, {race} race; {what}) at these phases: " + ", ".join(
        parts
    )


def simulate_starts(setting: StartSetting, mode: WarmStarts, studies: int, seed: int) -> list[StartNightResult]:
    """``studies`` alt nights under ``mode``: the same seeds (and so the same draws) in every mode."""
    return [StartNight(setting, mode, "alt", night_seed(seed, "alt", i)).run() for i in range(studies)]


def quantile(values: Sequence[float], q: float) -> float:
    """A value the nights took (the inverted CDF): no quantile between two nights' values."""
    return float(np.quantile(np.asarray(values, dtype=float), q, method="inverted_cdf"))


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 2 * 3600 else f"{seconds / 3600:.2f} h"


def start_table(results: dict[WarmStarts, list[StartNightResult]]) -> str:
    fresh = results.get(WarmStarts.OFF)
    head = (
        "starts",
        "nights",
        "GPU time (median)",
        "time / fresh (median)",
        "servers: searched + race (median)",
        "servers / fresh (median)",
        "warm starts (median)",
        "start share of GPU time",
        "confirmed / night",
        "claims faster",
        "claim width (median)",
        "regret: median (p10-p90)",
        "regret: mean",
        "answer is the best",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode, nights in results.items():
        widths = [r.width for r in nights if r.width is not None]
        regrets = [r.regret for r in nights]
        time_ratio = servers_ratio = "-"
        if fresh is not None and mode is not WarmStarts.OFF:
            time_ratio = f"{statistics.median(r.gpu_s / f.gpu_s for r, f in zip(nights, fresh)):.2f}"
            servers_ratio = f"{statistics.median(r.servers / f.servers for r, f in zip(nights, fresh)):.2f}"
        label = {WarmStarts.OFF: "fresh (--fresh-servers)", WarmStarts.SEARCH: "SEARCH (the default)"}.get(
            mode, mode.value.upper()
        )
        cells = (
            label,
            str(len(nights)),
            _duration(statistics.median(r.gpu_s for r in nights)),
            time_ratio,
            f"{statistics.median(r.servers for r in nights):g}: {statistics.median(r.searched for r in nights):g} + "
            f"{statistics.median(r.race_servers for r in nights):g}",
            servers_ratio,
            f"{statistics.median(r.warm for r in nights):g}",
            f"{sum(r.start_s for r in nights) / sum(r.gpu_s for r in nights):.1%}",
            f"{statistics.fmean(r.confirmed for r in nights):.2f}",
            f"{sum(r.claim == Claim.FASTER for r in nights) / len(nights):.1%}",
            f"{statistics.median(widths):.3f}" if widths else "-",
            f"{quantile(regrets, 0.5):.3f} ({quantile(regrets, 0.1):.3f}-{quantile(regrets, 0.9):.3f})",
            f"{statistics.fmean(regrets):.3f}",
            f"{sum(r.regret == 0.0 for r in nights) / len(nights):.1%}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def phase_table(setting: StartSetting) -> str:
    rows = ["| start | " + " | ".join(START_PHASES) + " | total, compile hit | total, cold compile |"]
    rows.append("|" + "---|" * (len(START_PHASES) + 3))
    for label, phases in (("fresh", setting.fresh), ("warm", setting.warm)):
        cells = [f"{getattr(phases, name):g}" for name in START_PHASES]
        hit, miss = phases.seconds(compiled=True), phases.seconds(compiled=False)
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {hit:g} | {miss:g} |")
    return "\n".join(rows)


def run_starts(settings: Sequence[StartSetting], studies: int, seed: int) -> None:
    started = time.process_time()
    for setting in settings:
        results = {}
        for mode in MODES:
            results[mode] = simulate_starts(setting, mode, studies, seed)
            print(
                f"[{setting.name} {mode.value}] {time.process_time() - started:.0f} s CPU", file=sys.stderr, flush=True
            )
        budget = "none (the study ends at its trials)" if setting.budget_s is None else f"{setting.budget_s / 3600:g} h"
        trials = "until the budget ends" if setting.n_trials is None else f"{setting.n_trials} searched"
        c = setting.confirm
        print(
            f"\n## {setting.name}: {setting.title}\n"
            f"budget {budget}; trials {trials}; races {c.rounds} rounds, prior spread {c.noise:g}; "
            f"alt landscape (8 configurations: one {setting.speeds[0]:g}x, one {setting.speeds[1]:g}x, the rest as "
            f"fast as the base); seeds {night_seed(seed, 'alt', 0)}.., "
            f"{studies} nights a mode, the same nights in each; the default is {DEFAULT_WARM_STARTS.value.upper()}"
        )
        print("assumes:")
        for line in setting.assumptions:
            print(f"- {line}")
        print(
            f"- searched trials of a configuration new to the night that compile cold: {setting.new_compile_share:.0%}"
        )
        print()
        print(phase_table(setting))
        if setting.measured is not None:
            print("\n" + measured_line(setting, setting.measured))
        print()
        print(start_table(results))
    print(
        "\nfresh: every server a new process; SEARCH: searched trials warm, the base's trial and the race servers "
        "(whose readings make the claim) fresh; ALL: every server warm. regret: 1 - the morning answer's true TPS over the best feasible "
        "configuration's (the landscape's fastest); claim width: the morning claim's high / low - 1 (nights whose answer "
        "is not the base); confirmed: races ending 'faster' with a truly faster configuration"
    )


# -- the table ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    design: str
    nights: int  # alt nights (and as many null ones)
    confirmed: float  # per alt night
    decided: float  # per alt night
    gpu_h_per_confirmed: float
    race_h_per_decided: float  # race GPU hours per decided race
    first_confirmed_h: float | None  # median over alt nights (a night without one counts as never)
    width: float | None  # median over alt nights with an interval
    alt_faster: float  # share of alt nights whose final claim is "faster"
    null_faster: int
    null_nights: int

    @property
    def null_interval(self) -> tuple[float, float]:
        return binomial_interval(self.null_faster, self.null_nights)


def _median_or_never(seconds: Sequence[float | None]) -> float | None:
    """The median in hours, a missing value counting as later than any (None: more than half never)."""
    if not seconds:
        return None
    ordered = sorted(math.inf if s is None else s / 3600.0 for s in seconds)
    middle = statistics.median(ordered)
    return None if math.isinf(middle) or math.isnan(middle) else middle


def summarize(design: str, alt: Sequence[NightResult], null: Sequence[NightResult]) -> Row:
    confirmed = sum(r.confirmed for r in alt)
    decided = sum(r.decided for r in alt)
    widths = [r.width for r in alt if r.width is not None]
    return Row(
        design=design,
        nights=len(alt),
        confirmed=confirmed / max(len(alt), 1),
        decided=sum(r.decided for r in alt) / max(len(alt), 1),
        gpu_h_per_confirmed=sum(r.gpu_s for r in alt) / 3600.0 / confirmed if confirmed else math.inf,
        race_h_per_decided=sum(r.race_gpu_s for r in alt) / 3600.0 / decided if decided else math.inf,
        first_confirmed_h=_median_or_never([r.first_confirmed_s for r in alt]),
        width=statistics.median(widths) if widths else None,
        alt_faster=sum(r.claim == "faster" for r in alt) / max(len(alt), 1),
        null_faster=sum(r.claim == "faster" for r in null),
        null_nights=len(null),
    )


def table(rows: Sequence[Row]) -> str:
    today = next((r for r in rows if r.design == "today"), None)
    head = (
        "design",
        "nights (alt/null)",
        "confirmed / night",
        "decided races / night",
        "GPU h / confirmed",
        "race GPU h / decided race",
        "median h to 1st confirmed",
        "median claim width",
        "alt: claims faster",
        "null: false faster (95 %)",
        "vs today: confirmed, GPU h / confirmed, width",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        low, high = r.null_interval
        against = "-"
        if today is not None and r is not today:
            parts = [
                f"{r.confirmed / today.confirmed:.2f}x" if today.confirmed else "-",
                f"{r.gpu_h_per_confirmed / today.gpu_h_per_confirmed:.2f}x"
                if math.isfinite(today.gpu_h_per_confirmed) and math.isfinite(r.gpu_h_per_confirmed)
                else "-",
                f"{r.width / today.width:.2f}x" if r.width is not None and today.width else "-",
            ]
            against = ", ".join(parts)
        cells = (
            r.design,
            f"{r.nights}/{r.null_nights}",
            f"{r.confirmed:.2f}",
            f"{r.decided:.2f}",
            f"{r.gpu_h_per_confirmed:.2f}",
            f"{r.race_h_per_decided:.3f}",
            "never" if r.first_confirmed_h is None else f"{r.first_confirmed_h:.2f}",
            "-" if r.width is None else f"{r.width:.3f}",
            f"{r.alt_faster:.1%}",
            f"{r.null_faster / max(r.null_nights, 1):.1%} ({low:.1%}-{high:.1%})",
            against,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def start_setting(name: str, args: argparse.Namespace) -> StartSetting:
    """``START_SETTINGS[name]`` with the command line's overrides."""
    if name not in START_SETTINGS:
        raise KeyError(f"--starts: unknown setting {name!r}: choose from {', '.join(START_SETTINGS)}")
    setting = START_SETTINGS[name]
    noise = dataclasses.replace(
        setting.noise,
        **{
            k: v
            for k, v in (
                ("sd_between", args.sd_between),
                ("sd_within", args.sd_within),
                ("drift_per_hour", args.drift_per_hour),
                ("tail_df", args.tail_df),
            )
            if v is not None
        },
    )
    confirm = setting.confirm
    if args.rounds is not None:
        confirm = dataclasses.replace(confirm, rounds=args.rounds)
    if args.prior_spread is not None:
        confirm = dataclasses.replace(confirm, noise=args.prior_spread)
    if args.new_compile_share is not None and not 0.0 <= args.new_compile_share <= 1.0:
        raise ValueError("--new-compile-share must be in 0-1")
    speeds = None
    if args.speeds:
        speeds = tuple(float(v) for v in args.speeds.split(","))
        if len(speeds) != 2 or min(speeds) <= 1.0:
            raise ValueError(f"--speeds: two ratios above 1 (FASTER,FAST), not {args.speeds!r}")
    changes = {
        "budget_s": None if args.budget_h is None else args.budget_h * 3600.0,
        "n_trials": args.n_trials,
        "ppl_s": args.ppl_s,
        "bridge_s": args.bridge_s,
        "run_s": args.run_s,
        "new_compile_share": args.new_compile_share,
        "speeds": speeds,
    }
    return dataclasses.replace(
        setting,
        noise=noise,
        confirm=confirm,
        fresh=parse_phases(setting.fresh, args.fresh_phases),
        warm=parse_phases(setting.warm, args.warm_phases),
        **{k: v for k, v in changes.items() if v is not None},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="a10g")
    parser.add_argument("--studies", type=int, default=200, help="nights per landscape (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="10 nights per landscape")
    parser.add_argument("--designs", default=",".join(DESIGNS), help=f"comma-separated (default {','.join(DESIGNS)})")
    parser.add_argument("--sd-between", type=float, help="SD of log TPS between fresh servers (setting's default)")
    parser.add_argument("--sd-within", type=float, help="SD of log TPS between runs in one server")
    parser.add_argument("--drift-per-hour", type=float, help="drift's SD per sqrt(hour) (0: none)")
    parser.add_argument("--tail-df", type=float, help="Student-t b and w on this df (> 2), scaled to the SD")
    parser.add_argument("--budget-h", type=float, help="the night's GPU hours")
    parser.add_argument("--start-s", type=float)
    parser.add_argument("--ppl-s", type=float)
    parser.add_argument("--bridge-s", type=float)
    parser.add_argument("--run-s", type=float, help="one TPS run")
    parser.add_argument("--rounds", type=int, help="race rounds (default: as sweeper run sets them)")
    parser.add_argument(
        "--prior-spread", type=float, help="the spread prior, as sweeper run's --noise (setting's default)"
    )
    parser.add_argument("--warm-k", type=int, default=3, help="warm-pair: rounds per set of live servers")
    parser.add_argument("--base-every", type=int, default=4, help="pooled-base: a base server every this many")
    parser.add_argument(
        "--starts",
        metavar="SETTINGS",
        help=f"fresh against warm starts instead of the race designs, for these ({', '.join(START_SETTINGS)})",
    )
    parser.add_argument("--n-trials", type=int, help="--starts: searched trials, the base's included")
    parser.add_argument("--speeds", metavar="FASTER,FAST", help="--starts: the alt landscape's two faster ratios")
    parser.add_argument(
        "--fresh-phases", metavar="NAME=S,...", help=f"--starts: fresh start ({', '.join(START_PHASES)})"
    )
    parser.add_argument("--warm-phases", metavar="NAME=S,...", help="--starts: warm start, the same names")
    parser.add_argument(
        "--new-compile-share", type=float, help="--starts: searched configurations new to the night that compile cold"
    )
    args = parser.parse_args(argv)
    print("python -m benchmarks.night " + shlex.join(sys.argv[1:] if argv is None else argv), flush=True)
    if args.starts:
        try:
            chosen = [start_setting(name, args) for name in args.starts.split(",") if name]
        except (KeyError, ValueError) as exc:
            parser.error(str(exc))
        run_starts(chosen, 10 if args.quick else args.studies, args.seed)
        return 0
    setting = SETTINGS[args.setting]
    noise = dataclasses.replace(
        setting.noise,
        **{
            k: v
            for k, v in (
                ("sd_between", args.sd_between),
                ("sd_within", args.sd_within),
                ("drift_per_hour", args.drift_per_hour),
                ("tail_df", args.tail_df),
            )
            if v is not None
        },
    )
    if noise.tail_df is not None and noise.tail_df <= 2:
        parser.error("--tail-df must be > 2 (a finite SD)")
    phases = dataclasses.replace(
        setting.phases,
        **{
            k: v
            for k, v in (
                ("budget_s", None if args.budget_h is None else args.budget_h * 3600.0),
                ("start_s", args.start_s),
                ("ppl_s", args.ppl_s),
                ("bridge_s", args.bridge_s),
                ("run_s", args.run_s),
            )
            if v is not None
        },
    )
    rounds = setting.rounds if args.rounds is None else args.rounds
    prior = setting.prior_spread if args.prior_spread is None else args.prior_spread
    setting = dataclasses.replace(setting, noise=noise, phases=phases, rounds=rounds, prior_spread=prior)
    try:
        designs = [
            parse_design(d, warm_k=args.warm_k, base_every=args.base_every) for d in args.designs.split(",") if d
        ]
    except ValueError as exc:
        parser.error(str(exc))
    studies = 10 if args.quick else args.studies
    started = time.process_time()
    rows = []
    for design in designs:
        alt = simulate(setting, design, "alt", studies, args.seed)
        null = simulate(setting, design, "null", studies, args.seed)
        rows.append(summarize(design.name, alt, null))
        print(f"[{design.name}] {time.process_time() - started:.0f} s CPU", file=sys.stderr, flush=True)
    print(
        f"setting {setting.name}: night {phases.budget_s / 3600:g} h; start {phases.start_s:g} s, PPL {phases.ppl_s:g} s, "
        f"bridge {phases.bridge_s:g} s, TPS run {phases.run_s:g} s; noise: between {noise.sd_between:g}, within "
        f"{noise.sd_within:g}, drift {noise.drift_per_hour:g}/sqrt(h), "
        f"{'normal' if noise.tail_df is None else f't({noise.tail_df:g})'}; {rounds} rounds, prior spread "
        f"{setting.prior_spread:g}; seeds {night_seed(args.seed, 'alt', 0)}.. (alt), "
        f"{night_seed(args.seed, 'null', 0)}.. (null), {studies} nights each"
    )
    print(table(rows))
    print(
        "confirmed: races ending 'faster' with a truly faster configuration; width: final claim's high / low - 1 "
        "(alt nights whose incumbent is not the base); GPU h / confirmed: all alt nights' GPU hours over their "
        "confirmed answers"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
