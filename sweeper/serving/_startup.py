"""Where a server's start-up went, read from its log.

vLLM writes a line at each step of its start (the engine process begins,
the weights are loaded, ``torch.compile`` is done, the KV cache is sized,
the CUDA graphs are captured, the engine is initialised, the API listens),
each with the time of day to the second. ``parse_startup`` turns those
lines into phases (a phase runs from the step before it to its own), and
``Startup.coarse`` folds them into the three that a study stores per trial:

* ``spawn``: from the exec of the serve command to the engine process's
  first line (Python imports, the API server's set-up, the engine process
  start);
* ``engine init``: the engine's own initialisation (weights, compile,
  memory profile and KV cache, graph capture, its warm-up);
* ``api ready``: from the engine's last step to the server's first answer.

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
# in the order a vLLM 0.26 server passes them; each phase ends at its milestone
MILESTONES = (
    Milestone(EXEC, re.compile(r"sweeper\.serving\._command: exec: ")),
    Milestone("api imports", re.compile(r"\(APIServer pid=\d+\) [A-Z]+ \d\d-\d\d ")),
    Milestone(ENGINE_START, re.compile(r"Initializing a V1 LLM engine")),
    Milestone("weight load", re.compile(r"Model loading took")),
    Milestone("torch.compile", re.compile(r"torch\.compile took [\d.]+ s in total"), last=True),
    Milestone("memory profile, KV cache", re.compile(r"(?:GPU|CPU) KV cache size")),
    Milestone("CUDA graph capture", re.compile(r"Graph capturing finished")),
    Milestone(ENGINE_DONE, re.compile(r"init engine \(profile, create kv cache")),
    Milestone("api set-up", re.compile(r"Starting vLLM server on")),
)
FIRST_ANSWER = "first answer"
# the stored phases of a start, in order, and the detailed phases each folds together
SPAWN, ENGINE_INIT, API_READY = "spawn", "engine init", "api ready"
START_PHASES = (SPAWN, ENGINE_INIT, API_READY)
_ENGINE_STEPS = ("weight load", "torch.compile", "memory profile, KV cache", "CUDA graph capture", ENGINE_DONE)
_COARSE = {"api imports": SPAWN, ENGINE_START: SPAWN, **dict.fromkeys(_ENGINE_STEPS, ENGINE_INIT)}

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

    def coarse(self) -> tuple[tuple[str, float], ...]:
        """The start as ``spawn``, ``engine init`` and ``api ready``, summing to ``ready_s``.

        Empty where the log shows no engine step or ``ready_s`` is unknown: the
        start is then one phase. Rounding to the log's second is absorbed by
        ``api ready``, which is never below zero (the engine's share is cut
        where the log's seconds overshoot the measured start)."""
        names = {name for name, _ in self.phases}
        if self.ready_s is None or not names & set(_ENGINE_STEPS):
            return ()
        spawn = sum(s for name, s in self.phases if _COARSE.get(name) == SPAWN)
        engine = sum(s for name, s in self.phases if _COARSE.get(name) == ENGINE_INIT)
        spawn = min(spawn, self.ready_s)
        engine = min(engine, self.ready_s - spawn)
        return ((SPAWN, spawn), (ENGINE_INIT, engine), (API_READY, self.ready_s - spawn - engine))

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
            at = found.get(milestone.name)
            if at is None or at < int(last):
                continue
            phases.append((milestone.name, max(0.0, float(at - last))))
            last = max(last, at)
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
