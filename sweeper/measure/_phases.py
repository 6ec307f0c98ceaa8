"""Where a study's server time went, phase by phase.

Every trial stores its phases as they end (``evaluate``'s order): the start
(split by ``sweeper.serving.parse_startup`` into ``spawn``, ``engine init``
and ``api ready`` where the server's log tells, else one ``start``), then
``ppl``, ``warmup``, ``screen``, ``tps``, ``fidelity`` and ``teardown``.
Verification repeats store theirs on their runs. ``time_by_phase`` sums
them over a study: the night's device time (a server holds its device from
its start to its stop), the share of it spent measuring, and vLLM's compile
time where the logs give it (part of ``engine init``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from storage import TrialRecord, VerificationRecord
from sweeper.serving import API_READY, ENGINE_INIT, SPAWN, START_PHASES

# the order phases happen in a server's life; names a study stores that are not here come last
# a start stored whole, the older split (spawn, engine init), then the split of START_PHASES
STARTING_ORDER = ("start", SPAWN, *START_PHASES[:-1], ENGINE_INIT, API_READY)
PHASE_ORDER = (
    *STARTING_ORDER,
    "ppl",
    "warmup",
    "screen",
    "tps",
    "fidelity",
    "reference",
    "teardown",
)
PHASE_LABELS = {
    "start": "start",
    "spawn": "spawn",
    "api imports": "API imports",
    "engine start": "engine process start",
    "weights": "weights",
    "compile": "compile",
    "kv cache": "memory profile, KV cache",
    "graph capture": "CUDA-graph capture",
    "engine warm-up": "engine warm-up",
    "engine init": "engine init",
    "api ready": "api ready",
    "ppl": "PPL",
    "warmup": "warm-up",
    "screen": "TPS screen",
    "tps": "TPS",
    "fidelity": "fidelity",
    "reference": "reference",
    "teardown": "stop",
}
STARTING = frozenset(STARTING_ORDER)
MEASURING = frozenset({"ppl", "warmup", "screen", "tps", "fidelity", "reference"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class PhaseTime:
    """One phase summed over a study's servers: ``count`` servers went through it."""

    name: str
    seconds: float
    count: int
    share: float  # of all the study's server time

    @property
    def label(self) -> str:
        return PHASE_LABELS.get(self.name, self.name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimeByPhase:
    """A study's server time by phase, in the order a server lives through them."""

    phases: tuple[PhaseTime, ...]
    servers: int  # servers with a phase on record (trials and verification repeats)
    verification_servers: int
    compile_s: float  # vLLM's own torch.compile time, within engine init (0 where no log gave it)
    compile_hits: int = 0  # trials whose every compiled graph came from vLLM's compile cache
    compile_misses: int = 0  # trials that compiled at least one graph
    warm_servers: int = 0  # trials whose server was forked from a warm launcher

    @property
    def total_s(self) -> float:
        return sum(p.seconds for p in self.phases)

    def seconds_of(self, names: Iterable[str]) -> float:
        wanted = set(names)
        return sum(p.seconds for p in self.phases if p.name in wanted)

    @property
    def starting_s(self) -> float:
        return self.seconds_of(STARTING)

    @property
    def measuring_s(self) -> float:
        return self.seconds_of(MEASURING)

    @property
    def measuring_share(self) -> float:
        return self.measuring_s / self.total_s if self.total_s else 0.0

    @property
    def starting_share(self) -> float:
        return self.starting_s / self.total_s if self.total_s else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "total_s": self.total_s,
            "servers": self.servers,
            "verification_servers": self.verification_servers,
            "starting_share": self.starting_share,
            "measuring_share": self.measuring_share,
            "compile_s": self.compile_s,
            "compile_hits": self.compile_hits,
            "compile_misses": self.compile_misses,
            "warm_servers": self.warm_servers,
            "phases": [dataclasses.asdict(p) for p in self.phases],
        }


def start_seconds(phases: Mapping[str, float] | Iterable[tuple[str, float]]) -> float:
    """A server's start, whether stored whole (``start``) or split (``START_PHASES``, or the older
    spawn, engine init, api ready)."""
    items = phases.items() if isinstance(phases, Mapping) else phases
    return sum(float(seconds) for name, seconds in items if name in STARTING)


def duration_text(seconds: float) -> str:
    """``43 s``, ``5 min 43 s``, ``2 h 05 min``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _percent(share: float) -> str:
    return f"{share * 100:.1f} %"


def phase_headline(time: TimeByPhase) -> str:
    """``12 min 31 s of server time in 13 servers: 88.2 % starting, 6.2 % measuring``."""
    servers = f"{time.servers} server{'s' if time.servers != 1 else ''}"
    notes = []
    if time.warm_servers:
        notes.append(f"{time.warm_servers} started warm")
    if time.verification_servers:
        notes.append(f"{time.verification_servers} of them verifying")
    if notes:
        servers += f" ({', '.join(notes)})"
    return (
        f"{duration_text(time.total_s)} of server time in {servers}: "
        f"{_percent(time.starting_share)} starting, {_percent(time.measuring_share)} measuring"
    )


def phase_rows(time: TimeByPhase) -> list[list[str]]:
    """One row a phase: label, time, share, time per server that went through it."""
    rows = []
    for phase in time.phases:
        label = phase.label
        if phase.name in ("engine init", "compile") and time.compile_s:
            label += f" (compile {duration_text(time.compile_s)}{_cache_note(time)})"
        elif phase.name == "compile" and (time.compile_hits or time.compile_misses):
            label += f" ({_cache_note(time).lstrip(', ')})"
        rows.append(
            [label, duration_text(phase.seconds), _percent(phase.share), f"{phase.seconds / phase.count:.1f} s"]
        )
    return rows


def _cache_note(time: TimeByPhase) -> str:
    if not (time.compile_hits or time.compile_misses):
        return ""
    return f", cache: {time.compile_hits} hit{'s' if time.compile_hits != 1 else ''}, {time.compile_misses} miss{'es' if time.compile_misses != 1 else ''}"


def time_by_phase(records: Sequence[TrialRecord], verifications: Sequence[VerificationRecord] = ()) -> TimeByPhase:
    """The study's phases summed over its trials (``records`` read with their phases) and
    its verification repeats."""
    totals: dict[str, list[float]] = {}
    servers = verification_servers = 0
    compile_s = 0.0
    hits = misses = warm = 0
    for record in records:
        if record.phases:
            servers += 1
        hit = record.extras.get("compile_cache_hit")
        if isinstance(hit, bool):
            hits, misses = hits + hit, misses + (not hit)
        warm += record.extras.get("server_start") == "warm"
        for name, seconds in record.phases:
            totals.setdefault(name, []).append(float(seconds))
        value = record.extras.get("compile_s")
        if isinstance(value, (int, float)):
            compile_s += float(value)
    for verification in verifications:
        for run in verification.runs:
            if run.phases:
                servers += 1
                verification_servers += 1
            for name, seconds in run.phases.items():
                totals.setdefault(name, []).append(float(seconds))
    grand = sum(sum(values) for values in totals.values()) or 1.0
    rank = {name: index for index, name in enumerate(PHASE_ORDER)}
    names = sorted(totals, key=lambda name: (rank.get(name, len(rank)), name))
    return TimeByPhase(
        phases=tuple(
            PhaseTime(name=name, seconds=sum(totals[name]), count=len(totals[name]), share=sum(totals[name]) / grand)
            for name in names
        ),
        servers=servers,
        verification_servers=verification_servers,
        compile_s=compile_s,
        compile_hits=hits,
        compile_misses=misses,
        warm_servers=warm,
    )
