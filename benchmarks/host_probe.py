"""How fast the host is, second by second, measured away from the server: a covariate for whole runs.

On a busy GPU host a launch-bound server moves between two speeds, in
stretches of 10-40 s, whichever client drives it; on the one quiet host met
so far it kept one speed (see "Whole-run parity on the GPU" in
docs/measurement.md). A whole run's TPS is then mostly its share of slow
stretches. The slow state is the host's (the hypervisor's core under the
guest, its memory, the path that launches GPU work), so a process on other
cores that times a fixed piece of work sees it too, and what it sees does
not depend on which client drives the server: it tells a quiet host from a
busy one (``parity.host_state``, printed before the first round) and can
take the host's state out of a whole-run comparison (``parity.adjusted_ratio``).

Every ``--interval-s`` it times three fixed pieces of work, and once a
second it writes a JSON line with their medians and the unix time::

    {"t": 1796209773.96, "cpu_ms": 1.41, "mem_ms": 3.02, "gpu_ms": 0.11, "n": 10}

- ``cpu_ms``: a pure-Python loop (the interpreter on one core, in cache);
- ``mem_ms``: copying a 32 MiB buffer (memory bandwidth);
- ``gpu_ms``: 10 launches of a one-element kernel and a synchronize (the
  launch path; absent without CUDA or with ``--no-gpu``). It adds well
  under 1 % to the GPU's load.

    python benchmarks/host_probe.py --out probe.jsonl [--cpus 13] [--interval-s 0.1] [--duration-s S]

It runs until SIGTERM or SIGINT (or ``--duration-s``), then writes what it
has and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hold_server import cpu_list  # noqa: E402

CPU_LOOP = 20_000
MEM_BYTES = 32 * 1024 * 1024
GPU_LAUNCHES = 10


def cpu_work() -> None:
    total = 0
    for i in range(CPU_LOOP):
        total += i * i % 7
    if total < 0:  # never; keeps the loop from being taken for dead code
        raise AssertionError


def make_mem_work() -> Callable[[], None]:
    source, target = bytearray(os.urandom(1024)) * (MEM_BYTES // 1024), bytearray(MEM_BYTES)

    def work() -> None:
        target[:] = source

    return work


def make_gpu_work() -> Callable[[], None] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    cell = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()

    def work() -> None:
        for _ in range(GPU_LAUNCHES):
            cell.add_(1.0)
        torch.cuda.synchronize()

    return work


def timed_ms(work: Callable[[], None]) -> float:
    began = time.perf_counter()
    work()
    return (time.perf_counter() - began) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON lines, one a second (appended)")
    parser.add_argument("--cpus", type=cpu_list, help="run on these CPUs only (such as 13)")
    parser.add_argument("--interval-s", type=float, default=0.1, help="time the work this often (0.1)")
    parser.add_argument("--duration-s", type=float, help="stop after this long (default: at SIGTERM)")
    parser.add_argument("--no-gpu", action="store_true", help="leave out the GPU launches")
    args = parser.parse_args()
    if not args.interval_s > 0:
        parser.error("--interval-s must be above 0")
    if args.cpus:
        os.sched_setaffinity(0, args.cpus)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    works: dict[str, Callable[[], None]] = {"cpu_ms": cpu_work, "mem_ms": make_mem_work()}
    gpu = None if args.no_gpu else make_gpu_work()
    if gpu is not None:
        works["gpu_ms"] = gpu
    for work in works.values():  # the first call pays for allocation and start-up
        work()
    began = time.monotonic()
    with open(args.out, "a", encoding="utf-8") as sink:
        samples: dict[str, list[float]] = {key: [] for key in works}
        second_began = time.time()
        next_at = time.monotonic()
        while not stopping and (args.duration_s is None or time.monotonic() - began < args.duration_s):
            for key, work in works.items():
                samples[key].append(timed_ms(work))
            now = time.time()
            if now - second_began >= 1.0:
                line = {"t": round((second_began + now) / 2, 3)}
                line |= {key: round(statistics.median(values), 4) for key, values in samples.items()}
                line["n"] = len(samples["cpu_ms"])
                sink.write(json.dumps(line) + "\n")
                sink.flush()
                samples = {key: [] for key in works}
                second_began = now
            next_at += args.interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))


if __name__ == "__main__":
    main()
