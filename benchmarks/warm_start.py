"""Does a warm-started server measure what a fresh one does, and how much sooner is it ready?

    python -m benchmarks.warm_start --pairs 30 --out ws/            # the CPU demo manifest
    python -m benchmarks.warm_start --manifest sweeper/demo/data/manifest-gpu.json --pairs 6 --out ws/
    python -m benchmarks.warm_start --summary ws/warm_start.jsonl

With a CUDA build of torch the launcher imports only vLLM's API server
(``warm_launcher.CUDA_VLLM_MODULES``). Each record's ``started`` says how its server started (a
warm server falls back to a fresh start where the launcher is not available).

Each pair starts the same configuration twice, once fresh (a new process, as the organizers
start it) and once warm (forked from a launcher that has imported vLLM once; see
``sweeper.serving.WarmLaunchers``), fresh first in odd pairs and warm first in even ones. Each
server runs ``evaluate`` as a study's trial does: PPL, the warm-up bridge, one TPS run, then
the greedy tokens of the first ``--reference-prompts`` prompts, with the compile cache a
study's server has (``CompileCache``: the host's folder for the manifest's K, and the host's
model-info and Triton caches). Every server is appended to ``OUT/warm_start.jsonl`` as it ends.

The summary gives:

* TPS warm / fresh, paired in log over the pairs, with its 95 % interval and the 90 % one of
  the equivalence test: two one-sided tests at +-``--margin`` (3 %) pass where the 90 %
  interval lies inside 1 - margin .. 1 + margin;
* whether every server read the same PPL (to the last digit) and the same greedy tokens;
* whether vLLM resolved the same engine configuration (its "non-default args" and engine
  config lines, ports and process ids left out);
* the ready time of each kind, and its start phases.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluators import PplSettings, TpsSettings, paired_ratio_interval
from sweeper.demo import demo_paths
from sweeper.errors import ERROR_ROOTS
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, evaluate, load_eval_data
from sweeper.serving import CompileCache, ServerProcess, resolved_config, shared_launchers

RECORD_FILE = "warm_start.jsonl"
KINDS = ("fresh", "warm")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def measure_one(
    manifest: Manifest, settings: EvalSettings, data: Any, kind: str, folder: Path, pair: int
) -> dict[str, Any]:
    """One server of ``kind``: its figures, tokens digest, engine configuration and start."""
    reference = folder / f"pair{pair:02d}-{kind}-tokens.json"
    log_path = folder / f"pair{pair:02d}-{kind}.log"
    run = dataclasses.replace(settings, warm_start=kind == "warm", save_reference=reference, log_path=log_path)
    servers: list[ServerProcess] = []

    class Keep:  # the ServerProcess, for its ready time and start kind
        def server_created(self, server: ServerProcess) -> None:
            servers.append(server)

        def phase_ended(self, phase: str, seconds: float) -> None:
            pass

        def server_stopped(self, server: ServerProcess) -> None:
            pass

    result = evaluate(manifest, run, data=data, hooks=Keep())  # type: ignore[arg-type]
    server = servers[0]
    tokens = [entry["token_ids"] for entry in json.loads(reference.read_text())["entries"]]
    log_text = log_path.read_text(errors="replace")
    startup = server.startup()
    return {
        "pair": pair,
        "kind": kind,
        "started": server.start_kind,
        "ready_s": server.ready_seconds,
        "phases": dict(startup.stored()),
        "tps": result.tps.tps if result.tps is not None and result.tps.ok else None,
        "ppl": repr(result.ppl.ppl) if result.ppl is not None else None,
        "tokens": _digest(tokens),
        "engine_config": _digest(resolved_config(log_text)),
        "engine_config_lines": len(resolved_config(log_text)),
        "log": log_path.name,
    }


def summarize(records: Sequence[Mapping[str, Any]], *, margin: float = 0.03) -> dict[str, Any]:
    """The pairs' TPS ratio with its intervals and the equivalence verdict; sameness; ready times."""
    by_pair: dict[int, dict[str, Mapping[str, Any]]] = {}
    for record in records:
        by_pair.setdefault(int(record["pair"]), {})[str(record["kind"])] = record
    pairs = [
        (float(p["warm"]["tps"]), float(p["fresh"]["tps"]))
        for p in by_pair.values()
        if set(p) == set(KINDS) and p["warm"]["tps"] and p["fresh"]["tps"]
    ]
    summary: dict[str, Any] = {"pairs": len(pairs), "servers": len(records), "margin": margin}
    if len(pairs) >= 2:
        ci95 = paired_ratio_interval(pairs, confidence=0.95)
        ci90 = paired_ratio_interval(pairs, confidence=0.90)
        logs = [math.log(a) - math.log(b) for a, b in pairs]
        summary.update(
            ratio=ci95.value,
            ratio_low95=ci95.low,
            ratio_high95=ci95.high,
            ratio_low90=ci90.low,
            ratio_high90=ci90.high,
            sd_log_ratio=statistics.stdev(logs),
            equivalent=bool(ci90.low >= 1 - margin and ci90.high <= 1 + margin),
        )
    for field in ("ppl", "tokens", "engine_config"):
        values = {str(r[field]) for r in records if r.get(field) is not None}
        summary[f"same_{field}"] = len(values) == 1
        summary[f"{field}_values"] = len(values)
    for kind in KINDS:
        ready = [float(r["ready_s"]) for r in records if r["kind"] == kind and r.get("ready_s")]
        tps = [float(r["tps"]) for r in records if r["kind"] == kind and r.get("tps")]
        if ready:
            summary[f"ready_{kind}_median_s"] = statistics.median(ready)
            summary[f"ready_{kind}_min_s"], summary[f"ready_{kind}_max_s"] = min(ready), max(ready)
        if len(tps) >= 2:
            summary[f"tps_{kind}_median"] = statistics.median(tps)
            summary[f"sd_log_tps_{kind}"] = statistics.stdev(math.log(t) for t in tps)
        phases: dict[str, list[float]] = {}
        for record in records:
            if record["kind"] == kind:
                for name, seconds in (record.get("phases") or {}).items():
                    phases.setdefault(name, []).append(float(seconds))
        summary[f"phases_{kind}_median_s"] = {name: statistics.median(v) for name, v in phases.items()}
    if summary.get("ready_fresh_median_s") and summary.get("ready_warm_median_s"):
        summary["ready_warm_over_fresh"] = summary["ready_warm_median_s"] / summary["ready_fresh_median_s"]
    return summary


def summary_text(summary: Mapping[str, Any]) -> str:
    lines = [f"{summary['pairs']} pairs ({summary['servers']} servers)"]
    if "ratio" in summary:
        verdict = "shown" if summary["equivalent"] else "not shown"
        lines.append(
            f"TPS warm / fresh {summary['ratio']:.4f} (95 % {summary['ratio_low95']:.4f}-{summary['ratio_high95']:.4f}; "
            f"90 % {summary['ratio_low90']:.4f}-{summary['ratio_high90']:.4f}); SD of the pairs' log ratio "
            f"{summary['sd_log_ratio']:.4f}; equivalence at +-{summary['margin'] * 100:g} % {verdict}"
        )
    for field, label in (("ppl", "PPL"), ("tokens", "greedy tokens"), ("engine_config", "engine configuration")):
        same = "identical in every server" if summary[f"same_{field}"] else f"{summary[f'{field}_values']} different"
        lines.append(f"{label}: {same}")
    for kind in KINDS:
        if f"ready_{kind}_median_s" in summary:
            phases = ", ".join(f"{k} {v:.1f}" for k, v in summary[f"phases_{kind}_median_s"].items())
            lines.append(
                f"ready {kind}: median {summary[f'ready_{kind}_median_s']:.1f} s "
                f"({summary[f'ready_{kind}_min_s']:.1f}-{summary[f'ready_{kind}_max_s']:.1f}); phases (median s): {phases}"
            )
    if "ready_warm_over_fresh" in summary:
        lines.append(f"ready warm / fresh (medians): {summary['ready_warm_over_fresh']:.3f}")
    return "\n".join(lines)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--manifest", help="manifest to serve (default: the bundled CPU demo)")
    parser.add_argument("--pairs", type=int, default=30, help="fresh/warm pairs (default 30)")
    parser.add_argument("--num-prompts", type=int, default=8, help="TPS prompts per server (default 8)")
    parser.add_argument("--output-len", type=int, default=128, help="tokens per TPS request (default 128)")
    parser.add_argument("--ppl-records", type=int, default=16, help="PPL records per server (default 16)")
    parser.add_argument("--reference-prompts", type=int, default=4, help="prompts whose greedy tokens are compared")
    parser.add_argument("--margin", type=float, default=0.03, help="equivalence margin (default 0.03: +-3 %%)")
    parser.add_argument("--out", default="warm-start", help="folder for the records and logs")
    parser.add_argument("--warm-first", action="store_true", help="warm first in odd pairs (default: fresh first)")
    parser.add_argument("--summary", help="only summarize this warm_start.jsonl")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary_text(summarize(_read(Path(args.summary)), margin=args.margin)))
        return 0
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    records_path = folder / RECORD_FILE
    done = _read(records_path) if records_path.exists() else []
    demo = demo_paths()
    manifest = Manifest.load(args.manifest or demo.manifest)
    settings = EvalSettings(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        tps=TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=1),
        ppl=PplSettings(max_records=args.ppl_records),
        reference_prompts=args.reference_prompts,
        overrides=CompileCache().env_for(manifest.env, [], manifest.serve, folder),
    )
    data = load_eval_data(manifest, settings)
    began = time.monotonic()
    for pair in range(1, args.pairs + 1):
        order = KINDS if (pair % 2) != args.warm_first else KINDS[::-1]
        for kind in order:
            if any(r["pair"] == pair and r["kind"] == kind for r in done):
                continue  # resumed: already measured
            try:
                record = measure_one(manifest, settings, data, kind, folder, pair)
            except ERROR_ROOTS as exc:
                record = {"pair": pair, "kind": kind, "error": str(exc)[:500]}
            record["at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            with open(records_path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            done.append(record)
            print(
                json.dumps({k: record.get(k) for k in ("pair", "kind", "ready_s", "tps", "ppl", "tokens")}), flush=True
            )
    shared_launchers().close()
    print(f"{args.pairs} pairs in {time.monotonic() - began:.0f} s")
    print(summary_text(summarize([r for r in done if "error" not in r], margin=args.margin)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
