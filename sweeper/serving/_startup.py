"""Where a server's start-up went, read from its log.

vLLM writes a line at each step of its start (the engine process begins,
the weights are loaded, ``torch.compile`` is done, the KV cache is sized,
the CUDA graphs are captured, the engine is initialised, the API listens),
each with the time of day to the second. ``parse_startup`` turns those
lines into phases (a phase runs from the step before it to its own), and
``Startup.stored`` folds them into those a study stores per trial
(``START_PHASES``): the API server's imports (the exec to its first line),
the engine process's start (the API server's set-up and the engine
process's own start, up to its first line), the weights, the compile,
the memory profile and KV cache, the CUDA-graph capture, the engine's
warm-up, and the API's first answer. Studies stored before that split hold
``spawn``, ``engine init`` and ``api ready`` (``LEGACY_START_PHASES``).

The anchor is sweeper's own ``exec:`` line where the serve command is
``sweeper serve``, else the moment the process was started
(``started_at``, seconds since the epoch, read in local time as the log's
lines are). A log with no engine step (another server, another vLLM) gives
no phases, and the caller keeps the start as one phase.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

# A line's time: sweeper's own lines start "HH:MM:SS LEVEL name:", vLLM's carry "LEVEL MM-DD HH:MM:SS [file:line]".
_SWEEPER_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d) [A-Z]+ ")
_VLLM_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d (\d\d):(\d\d):(\d\d) ")


@dataclasses.dataclass(frozen=True)
class Milestone:
    """A start-up step done: its name, the log line that marks it, the first or the last such line."""

    name: str
    pattern: re.Pattern[str]
    last: bool = False


EXEC = "exec"
ENGINE_START = "engine process start"
ENGINE_DONE = "engine warm-up after capture"
WORKER_START = "worker process start"
# in the order a vLLM 0.26 server passes them; each phase ends at its milestone
MILESTONES = (
    Milestone(EXEC, re.compile(r"sweeper\.serving\._command: exec: ")),
    Milestone("api imports", re.compile(r"\(APIServer pid=\d+\) [A-Z]+ \d\d-\d\d ")),
    Milestone(ENGINE_START, re.compile(r"Initializing a V1 LLM engine")),
    Milestone(WORKER_START, re.compile(r"Starting to load model")),
    # the GPU runner's total, or on CPU each model's (the target's, then the drafter's)
    Milestone("weight load", re.compile(r"Model loading took|Loading weights took"), last=True),
    Milestone("torch.compile", re.compile(r"torch\.compile took [\d.]+ s in total"), last=True),
    Milestone("memory profile, KV cache", re.compile(r"(?:GPU|CPU) KV cache size")),
    Milestone("CUDA graph capture", re.compile(r"Graph capturing finished")),
    Milestone(ENGINE_DONE, re.compile(r"init engine \(profile, create kv cache")),
    Milestone("api set-up", re.compile(r"Starting vLLM server on")),
)
FIRST_ANSWER = "first answer"
# the stored phases of a start, in the order a server passes them, and the detailed phases each holds
API_IMPORTS, ENGINE_PROCESS = "api imports", "engine start"
WEIGHTS, COMPILE, KV_CACHE, GRAPH_CAPTURE = "weights", "compile", "kv cache", "graph capture"
ENGINE_WARMUP, API_READY = "engine warm-up", "api ready"
START_PHASES = (API_IMPORTS, ENGINE_PROCESS, WEIGHTS, COMPILE, KV_CACHE, GRAPH_CAPTURE, ENGINE_WARMUP, API_READY)
# what studies stored before the split above (still read: status and the report show them as stored)
SPAWN, ENGINE_INIT = "spawn", "engine init"
LEGACY_START_PHASES = (SPAWN, ENGINE_INIT, API_READY)
_STORED = {
    "api imports": API_IMPORTS,
    ENGINE_START: ENGINE_PROCESS,
    WORKER_START: ENGINE_PROCESS,
    "weight load": WEIGHTS,
    "torch.compile": COMPILE,
    "memory profile, KV cache": KV_CACHE,
    "CUDA graph capture": GRAPH_CAPTURE,
    ENGINE_DONE: ENGINE_WARMUP,
    "api set-up": API_READY,
    FIRST_ANSWER: API_READY,
}
_ENGINE_STEPS = ("weight load", "torch.compile", "memory profile, KV cache", "CUDA graph capture", ENGINE_DONE)

_COMPILE_TOTAL = re.compile(r"torch\.compile took ([\d.]+) s in total")
_COMPILE_MISS = re.compile(r"Compiling a graph for compile range .* takes ([\d.]+) s")
_COMPILE_HIT = re.compile(r"Directly load the compiled graph")
_CACHE_DIR = re.compile(r"torch_compile_cache/([0-9a-f]+)/")
_GRAPHS = re.compile(r"Graph capturing finished in ([\d.]+) secs")
_INIT_ENGINE = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s(?: \(compilation: ([\d.]+) s\))?"
)


def _seconds_of_day(line: str) -> int | None:
    match = _SWEEPER_TIME.match(line) or _VLLM_TIME.search(line)
    if match is None:
        return None
    hours, minutes, seconds = (int(group) for group in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _local_seconds_of_day(epoch_s: float) -> float:
    local = time.localtime(epoch_s)
    return local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + (epoch_s % 1.0)


@dataclasses.dataclass(frozen=True)
class Startup:
    """Where one server's start-up went: phases in seconds (1 s resolution, from the log's
    timestamps) and what vLLM itself reports about its compile cache and graphs."""

    phases: tuple[tuple[str, float], ...]
    compile_s: float | None  # vLLM's own "torch.compile took" figures, summed over the graphs
    compile_hits: int  # graphs loaded from the compile cache
    compile_misses: int  # graphs compiled
    cache_hashes: tuple[str, ...]  # the compile-cache folders used (one per vLLM configuration)
    graph_capture_s: float | None
    init_engine_s: float | None
    ready_s: float | None

    @property
    def cache_hit(self) -> bool | None:
        """Did every graph come from the compile cache? None where the log names none."""
        if not (self.compile_hits or self.compile_misses):
            return None
        return self.compile_misses == 0

    def stored(self) -> tuple[tuple[str, float], ...]:
        """The start in ``START_PHASES`` (those the log shows, in order), summing to ``ready_s``.

        ``api imports`` runs from the exec to the API server's first line,
        ``engine start`` from there to the engine process's first line (the
        API server's set-up, the engine process's own start), then the
        engine's steps, and ``api ready`` from the engine's last step to the
        first answer. Empty where the log shows no engine step or ``ready_s``
        is unknown: the start is then one phase. Rounding to the log's second
        is absorbed by ``api ready``, never below zero (a phase is cut where
        the log's seconds overshoot the measured start)."""
        names = {name for name, _ in self.phases}
        if self.ready_s is None or not names & set(_ENGINE_STEPS):
            return ()
        sums: dict[str, float] = {}
        for name, seconds in self.phases:
            stored = _STORED.get(name)
            if stored is not None and stored != API_READY:
                sums[stored] = sums.get(stored, 0.0) + seconds
        split, used = [], 0.0
        for name in START_PHASES[:-1]:
            if name in sums:
                part = min(sums[name], self.ready_s - used)
                split.append((name, part))
                used += part
        split.append((API_READY, self.ready_s - used))
        return tuple(split)

    def to_dict(self) -> dict[str, Any]:
        return {
            "phases": dict(self.phases),
            "compile_s": self.compile_s,
            "compile_hits": self.compile_hits,
            "compile_misses": self.compile_misses,
            "cache_hit": self.cache_hit,
            "cache_hashes": list(self.cache_hashes),
            "graph_capture_s": self.graph_capture_s,
            "init_engine_s": self.init_engine_s,
            "ready_s": self.ready_s,
        }


def parse_startup(text: str, ready_s: float | None = None, *, started_at: float | None = None) -> Startup:
    """The start-up phases of the server whose log is ``text``.

    A phase runs from the milestone before it to its own; a milestone the log
    lacks (another vLLM version) folds its phase into the next one. With
    ``ready_s`` (the time sweeper measured from exec to the first answer of
    /v1/models) the last phase, "first answer", runs up to that moment. A log
    without sweeper's ``exec:`` line is anchored at ``started_at`` (seconds
    since the epoch) when given.
    """
    found: dict[str, float] = {}
    compile_total, hits, misses, hashes = [], 0, 0, []
    graphs = init_engine = None
    previous, day = None, 0
    for line in text.splitlines():
        at = _seconds_of_day(line)
        if at is None:
            continue
        if previous is not None and at < previous - 12 * 3600:
            day += 86400  # the log passed midnight
        previous = at
        at += day
        for milestone in MILESTONES:
            if milestone.pattern.search(line) and (milestone.last or milestone.name not in found):
                found[milestone.name] = at
        if match := _COMPILE_TOTAL.search(line):
            compile_total.append(float(match.group(1)))
        if _COMPILE_MISS.search(line):
            misses += 1
        if _COMPILE_HIT.search(line):
            hits += 1
        if (match := _CACHE_DIR.search(line)) and match.group(1) not in hashes:
            hashes.append(match.group(1))
        if graphs is None and (match := _GRAPHS.search(line)):
            graphs = float(match.group(1))
        if init_engine is None and (match := _INIT_ENGINE.search(line)):
            init_engine = float(match.group(1))
    if EXEC not in found and started_at is not None and found:
        anchor = _local_seconds_of_day(started_at)
        first = min(found.values())
        found[EXEC] = anchor - 86400 if anchor > first + 12 * 3600 else anchor  # started before midnight
    phases: list[tuple[str, float]] = []
    if EXEC in found:
        last = found[EXEC]
        for milestone in MILESTONES[1:]:
            reached = found.get(milestone.name)
            if reached is None or reached < int(last):
                continue
            phases.append((milestone.name, max(0.0, float(reached - last))))
            last = max(last, reached)
        if ready_s is not None:
            phases.append((FIRST_ANSWER, max(0.0, round(found[EXEC] + ready_s - last, 1))))
    return Startup(
        phases=tuple(phases),
        compile_s=round(sum(compile_total), 2) if compile_total else None,
        compile_hits=hits,
        compile_misses=misses,
        cache_hashes=tuple(hashes),
        graph_capture_s=graphs,
        init_engine_s=init_engine,
        ready_s=ready_s,
    )


# vLLM's lines that state the configuration it resolved, and what differs between two servers of one
# configuration in them (their port, process ids, temporary names)
_CONFIG_LINES = (
    re.compile(r"non-default args: (.*)$"),
    re.compile(r"Initializing a V1 LLM engine .*? with config: (.*)$"),
)
_VARYING = (
    re.compile(r"'port': \d+"),
    re.compile(r"pid=\d+"),
    re.compile(r"vllm_dist_[0-9a-f]+"),
    re.compile(r"/tmp/[^\s',]+"),
)


def resolved_config(text: str) -> tuple[str, ...]:
    """vLLM's resolved configuration in a server log ("non-default args", the engine's config),
    with the port, process ids and temporary names taken out: equal for two servers of one
    configuration however they were started."""
    lines = []
    for line in text.splitlines():
        for pattern in _CONFIG_LINES:
            match = pattern.search(line)
            if match:
                value = match.group(1)
                for varying in _VARYING:
                    value = varying.sub("<varies>", value)
                lines.append(value.strip())
    return tuple(lines)
