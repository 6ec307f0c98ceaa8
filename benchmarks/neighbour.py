"""Does a server read the same TPS beside an idle neighbour, and do two starts at once cost less?

    python -m benchmarks.neighbour --manifest sweeper/demo/data/manifest-gpu.json --rounds 3 --runs 3 --out nb/
    python -m benchmarks.neighbour --summary nb/neighbour.jsonl

The question behind a race that keeps two servers on one GPU (docs/noise.md): a server's start is
mostly spent outside the GPU (the process, imports, the engine's set-up), so two servers started
together should be ready in little more than one's time, and a race could then measure the pair
one after the other while the other idles. That only holds if an idle neighbour leaves TPS as it
is. Each round measures the manifest both ways in fresh servers, the order turned every round:

- ``alone``: one server started, its warm-up bridge, then ``--runs`` TPS runs;
- ``pair``: two servers started at once (both processes spawned, then both awaited), then the
  first one's bridge and runs while the second idles (ready, no requests), then the second's
  while the first idles.

Every server and run is appended to ``OUT/neighbour.jsonl`` as it is measured. The summary gives
TPS beside an idle neighbour over TPS alone (each round's pair mean over its alone server's,
``paired_ratio_interval`` over the rounds) and the seconds until both of a pair are ready against
twice the alone server's ready time. The manifest must leave room for two servers
(``GPU_MEMORY_UTILIZATION`` at most 0.45 on a GPU): a pair that cannot start is recorded as failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluators import TpsSettings, WarmupSettings, paired_ratio_interval
from sweeper.demo import demo_paths
from sweeper.errors import ERROR_ROOTS
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, load_eval_data, measure_server, warmup_settings_from
from sweeper.serving import ServerProcess

RECORD_FILE = "neighbour.jsonl"


class Records:
    """``OUT/neighbour.jsonl``, one JSON object a line, each also printed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, kind: str, **figures: Any) -> None:
        line = {"kind": kind, "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        line.update(figures)
        with open(self.path, "a") as handle:
            handle.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)


def _measure(process: ServerProcess, data: Any, settings: EvalSettings, runs: int, write: Any, **where: Any) -> None:
    """The bridge once, then ``runs`` TPS runs, each written as it ends."""
    bridge = dataclasses.replace(settings, tps=None)
    measure_server(process.base_url, process.served_model_name, data, bridge, warmup=bridge.warmup)
    timed = dataclasses.replace(settings, warmup=WarmupSettings(enabled=False))
    for run in range(1, runs + 1):
        at = time.monotonic()
        result = measure_server(process.base_url, process.served_model_name, data, timed, warmup=timed.warmup)
        tps = result.tps
        write(
            "run",
            run=run,
            tps=tps.tps if tps is not None and tps.ok else None,
            seconds=round(time.monotonic() - at, 3),
            **where,
        )


def measure_round(manifest: Manifest, round_: int, args: argparse.Namespace, data: Any, write: Any) -> None:
    settings = EvalSettings(
        prompts=str(args.prompts or demo_paths().prompts_tuning),
        tps=TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=1),
        ppl=None,
        warmup=warmup_settings_from(manifest),
    )
    order = ("alone", "pair") if round_ % 2 else ("pair", "alone")
    for shape in order:
        logs = [args.out / "logs" / f"r{round_}-{shape}-{i}.log" for i in (1, 2)]
        count = 1 if shape == "alone" else 2
        servers = [ServerProcess(manifest, log_path=logs[i], ready_timeout_s=900.0) for i in range(count)]
        began = time.monotonic()
        try:
            for server in servers:
                server.start()
            for server in servers:
                server.wait_ready()
            both = time.monotonic() - began
            for index, server in enumerate(servers, start=1):
                write("server", round=round_, shape=shape, server=index, ready_s=server.ready_seconds)
            write("ready", round=round_, shape=shape, servers=count, all_ready_s=round(both, 3))
            for index, server in enumerate(servers, start=1):
                _measure(server, data, settings, args.runs, write, round=round_, shape=shape, server=index)
        except (*ERROR_ROOTS, OSError) as exc:
            write("failed", round=round_, shape=shape, error=str(exc).splitlines()[0])
        finally:
            for server in servers:
                server.stop()


def measure(args: argparse.Namespace) -> Path:
    manifest = Manifest.load(args.manifest)
    args.out.mkdir(parents=True, exist_ok=True)
    records = Records(args.out / RECORD_FILE)
    records.write(
        "settings",
        manifest=args.manifest.name,
        rounds=args.rounds,
        runs=args.runs,
        sizes=[args.num_prompts, args.output_len],
        gpu_memory_utilization=manifest.env.get("GPU_MEMORY_UTILIZATION"),
    )
    probe = EvalSettings(
        prompts=str(args.prompts or demo_paths().prompts_tuning),
        tps=TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len),
        ppl=None,
    )
    data = load_eval_data(manifest, probe)  # loaded and checked before any server starts
    started = time.monotonic()
    for round_ in range(1, args.rounds + 1):
        if args.budget_s and round_ > 1 and (time.monotonic() - started) * round_ / (round_ - 1) > args.budget_s:
            records.write("stopped", reason=f"the next round would end past --budget-s {args.budget_s:.0f}")
            break
        measure_round(manifest, round_, args, data, records.write)
    return records.path


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per round: the alone server's and the pair's mean TPS (geometric, over runs and servers) and
    their ready times; over rounds: pair / alone with its interval, and the start cost."""
    rounds: dict[int, dict[str, Any]] = {}
    for line in records:
        if line.get("kind") not in ("run", "ready"):
            continue
        entry = rounds.setdefault(int(line["round"]), {"alone": [], "pair": [], "ready": {}})
        if line["kind"] == "ready":
            entry["ready"][line["shape"]] = float(line["all_ready_s"])
        elif line.get("tps"):
            entry[line["shape"]].append(float(line["tps"]))
    pairs, starts = [], []
    per_round = []
    for number in sorted(rounds):
        entry = rounds[number]
        if not entry["alone"] or not entry["pair"]:
            continue
        alone, pair = _geometric_mean(entry["alone"]), _geometric_mean(entry["pair"])
        pairs.append((pair, alone))
        row = {"round": number, "alone_tps": alone, "pair_tps": pair, "ratio": pair / alone}
        if "alone" in entry["ready"] and "pair" in entry["ready"]:
            row["alone_ready_s"], row["pair_ready_s"] = entry["ready"]["alone"], entry["ready"]["pair"]
            starts.append(entry["ready"]["pair"] / (2.0 * entry["ready"]["alone"]))
        per_round.append(row)
    interval = paired_ratio_interval(pairs) if len(pairs) >= 2 else None
    return {
        "rounds": per_round,
        "ratio": _geometric_mean([p / a for p, a in pairs]) if pairs else None,
        "interval": interval.to_dict() if interval is not None else None,
        "start_share": statistics.fmean(starts) if starts else None,
    }


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    lines = [
        f"round {r['round']}: alone {r['alone_tps']:.1f} tok/s, beside an idle neighbour {r['pair_tps']:.1f} "
        f"({r['ratio']:.3f})"
        + (
            f"; ready alone {r['alone_ready_s']:.1f} s, both of a pair {r['pair_ready_s']:.1f} s"
            if "pair_ready_s" in r
            else ""
        )
        for r in summary["rounds"]
    ]
    if summary["ratio"] is None:
        return [*lines, "no round with both shapes measured"]
    iv = summary["interval"]
    spread = (
        f" (95 % {iv['low']:.3f}-{iv['high']:.3f}, {len(summary['rounds'])} rounds)"
        if iv
        else " (one round: no interval)"
    )
    lines.append(f"TPS beside an idle neighbour / alone: {summary['ratio']:.3f}{spread}")
    if summary["start_share"] is not None:
        lines.append(
            f"a pair's start over two alone starts: {summary['start_share']:.2f} "
            "(0.5: two starts for the price of one; 1.0: no saving)"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=None, help="the manifest (default: the CPU demo's)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of alone + pair (default 3)")
    parser.add_argument("--runs", type=int, default=3, help="TPS runs a server (default 3)")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--prompts", help="prompt set (default: the demo's tuning prompts)")
    parser.add_argument("--budget-s", type=float, help="start no round that would end past this")
    parser.add_argument("--out", type=Path, default=Path("neighbour"))
    parser.add_argument("--summary", type=Path, help="print the summary of a records file and exit")
    args = parser.parse_args(argv)
    if args.summary is not None:
        path = args.summary
    else:
        if args.rounds < 1 or args.runs < 1:
            parser.error("--rounds and --runs must be at least 1")
        args.manifest = args.manifest or demo_paths().manifest
        path = measure(args)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for line in summary_lines(summarize(records)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
