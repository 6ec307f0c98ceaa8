"""Where the spread of TPS comes from: between fresh servers, between runs inside one, or drift.

    python -m benchmarks.noise_split --servers 4 --runs 5 --sizes 8x128 --out noise/
    python -m benchmarks.noise_split --arm base --arm base-trial:shape=trial --servers 4 --runs 3 --out gap/
    python -m benchmarks.noise_split --manifest sweeper/demo/data/manifest-gpu.json \
        --sizes 8x128,128x512 --runs 6,2 --servers 3 --out gpu/
    python -m benchmarks.noise_split --summary noise/noise_split.jsonl

Each arm (a label, optional ``shape=trial`` and env overrides ``KEY=VALUE``,
joined by ``:``) is started in ``--servers`` fresh servers, the arms
interleaved (A B A B ...). Each server is warmed up once with the manifest's
own bridge (``shape=trial`` first scores ``--ppl-records`` PPL records, as a
study's trial does; the default ``shape=rerun`` does not, as ``sweeper rerun``
does not), then runs ``--runs`` TPS runs at each of ``--sizes`` back to back
(one count for every size or one a size; the sizes alternating run by run), each run as a study measures one (its own
warm-up requests, then the timed requests). Every run and every server's
start-up phases are appended to ``OUT/noise_split.jsonl`` as they are
measured; ``--budget-s`` starts no server that would not end within it.

The summary gives, per arm and size, the SD of log TPS between servers and
within a server (``evaluators.nested_spread``) with intervals, the first
run's offset from the server's later runs, drift in time (the slope of log
TPS per hour, between servers' means and inside servers), and, for two arms,
their ratio over the interleaved rounds (``paired_ratio_interval`` on the
servers' means): the control that tells a study-shaped server from a
re-run-shaped one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.gpu_check import padded_prompts
from evaluators import (
    PplSettings,
    TpsSettings,
    WarmupSettings,
    nested_spread,
    paired_ratio_interval,
    t_quantile,
)
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, load_eval_data, measure_server, warmup_settings_from
from sweeper.serving import ServerProcess

RECORD_FILE = "noise_split.jsonl"
SHAPES = ("rerun", "trial")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One configuration measured: its label, its shape, its env overrides."""

    label: str
    shape: str = "rerun"
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_arm(text: str) -> Arm:
    """``base``, ``base-trial:shape=trial``, ``w16:SLIDING_WINDOW=16`` -> an Arm; bad text is an error."""
    label, *parts = [part.strip() for part in text.split(":")]
    if not label or "=" in label:
        raise argparse.ArgumentTypeError(f"--arm {text!r}: start with a label (for example base or w16:KEY=VALUE)")
    shape, overrides = "rerun", {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--arm {text!r}: {part!r} is not KEY=VALUE")
        if key == "shape":
            if value not in SHAPES:
                raise argparse.ArgumentTypeError(f"--arm {text!r}: shape must be one of {', '.join(SHAPES)}")
            shape = value
        else:
            overrides[key] = value
    return Arm(label=label, shape=shape, overrides=overrides)


def parse_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``"8x128,128x512"`` -> ((8, 128), (128, 512))."""
    sizes = []
    for item in text.split(","):
        prompts, sep, tokens = item.strip().partition("x")
        if not (sep and prompts.isdigit() and tokens.isdigit()):
            raise argparse.ArgumentTypeError(f"--sizes: {item.strip()!r} is not PROMPTSxTOKENS (for example 8x128)")
        sizes.append((int(prompts), int(tokens)))
    return tuple(sizes)


def parse_runs(text: str) -> tuple[int, ...]:
    """``"4"`` (every size) or ``"6,2"`` (one count a size, in the order of ``--sizes``)."""
    try:
        counts = tuple(int(item) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--runs: {text!r} is not a count or counts such as 6,2") from None
    if any(count < 2 for count in counts):
        raise argparse.ArgumentTypeError(f"--runs {text}: at least 2 runs a size, or nothing can be split")
    return counts


def runs_per_size(runs: Sequence[int], sizes: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """The runs of each size: one count for all, or one a size."""
    if len(runs) == 1:
        return tuple(runs) * len(sizes)
    if len(runs) != len(sizes):
        raise argparse.ArgumentTypeError(f"--runs: {len(runs)} counts for {len(sizes)} sizes")
    return tuple(runs)


def size_key(sizes: Sequence[int]) -> str:
    return f"{sizes[0]}x{sizes[1]}"


# -- measuring ----------------------------------------------------------------


def run_server(
    manifest: Manifest,
    arm: Arm,
    index: int,
    args: argparse.Namespace,
    prompts: Path | None,
    write: Any,
) -> float:
    """One fresh server of ``arm``: its start-up, its bridge, its runs, each written as measured.
    Returns the server's wall time."""
    began = time.monotonic()
    log = args.out / "logs" / f"{arm.label}-{index:02d}.log"
    server = ServerProcess(manifest, overrides=dict(arm.overrides), log_path=log, ready_timeout_s=900.0)
    demo = demo_paths()
    first = EvalSettings(
        prompts=str(prompts or args.prompts or demo.prompts_tuning),
        ppl_data=str(args.ppl_data or demo.ppl_tuning),
        tps=None,
        ppl=PplSettings(max_records=args.ppl_records) if arm.shape == "trial" else None,
        warmup=warmup_settings_from(manifest, arm.overrides),
    )
    longest = max(args.sizes, key=lambda s: (s[1], s[0]))
    # loaded and checked before the server starts (prompt lengths against the longest run)
    data = load_eval_data(
        manifest,
        dataclasses.replace(
            first, tps=TpsSettings(num_prompts=longest[0], output_len=longest[1]), overrides=arm.overrides
        ),
    )
    with server:
        startup = server.startup()
        write(
            "server",
            arm=arm.label,
            server=index,
            ready_s=server.ready_seconds,
            start_phases=dict(startup.stored()),
            compile_s=startup.compile_s,
        )
        timings: dict[str, float] = {}
        measure_server(server.base_url, server.served_model_name, data, first, warmup=first.warmup, timings=timings)
        write("bridge", arm=arm.label, server=index, **{f"{k}_s": round(v, 3) for k, v in timings.items()})
        runs_at = dict(zip(args.sizes, runs_per_size(args.runs, args.sizes), strict=True))
        for run in range(1, max(runs_at.values()) + 1):
            for sizes in args.sizes if run % 2 else tuple(reversed(args.sizes)):
                if run > runs_at[sizes]:
                    continue
                settings = dataclasses.replace(
                    first,
                    ppl=None,
                    warmup=WarmupSettings(enabled=False),
                    tps=TpsSettings(num_prompts=sizes[0], output_len=sizes[1], warmup_requests=args.warmup_requests),
                )
                at = time.time()
                result = measure_server(
                    server.base_url, server.served_model_name, data, settings, warmup=settings.warmup
                )
                tps = result.tps
                write(
                    "run",
                    arm=arm.label,
                    server=index,
                    run=run,
                    sizes=list(sizes),
                    at_epoch=round(at, 3),
                    tps=tps.tps if tps is not None else None,
                    seconds=round(time.time() - at, 3),
                    completed=tps.completed if tps is not None else 0,
                )
    return time.monotonic() - began


def measure(args: argparse.Namespace) -> Path:
    manifest = Manifest.load(args.manifest)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / RECORD_FILE
    wanted = max(prompts for prompts, _ in args.sizes)
    demo = demo_paths()
    prompts = None
    if args.prompts is None and wanted > len(json.loads(demo.prompts_tuning.read_text())):
        prompts = padded_prompts(
            (demo.prompts_tuning, demo.prompts_heldout), wanted, args.out / f"prompts-{wanted}.json"
        )

    def write(kind: str, **figures: Any) -> None:
        line = {"kind": kind, "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        line.update(figures)
        with open(path, "a") as handle:
            handle.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)

    write(
        "settings", manifest=_shown_path(args.manifest), arms=[dataclasses.asdict(a) for a in args.arm], **_plain(args)
    )
    started, longest = time.monotonic(), 0.0
    for index in range(1, args.servers + 1):
        for arm in args.arm:
            elapsed = time.monotonic() - started
            if args.budget_s and elapsed + longest * 1.1 > args.budget_s:
                write("stopped", reason=f"the next server would end past --budget-s {args.budget_s:.0f}")
                return path
            longest = max(longest, run_server(manifest, arm, index, args, prompts, write))
    return path


def _shown_path(path: Path) -> str:
    """A path as a record keeps it: relative to the repository when inside it, else its name only."""
    resolved = Path(path).resolve()
    repository = Path(__file__).resolve().parents[1]
    return str(resolved.relative_to(repository)) if resolved.is_relative_to(repository) else resolved.name


def _plain(args: argparse.Namespace) -> dict[str, Any]:
    keep = ("servers", "runs", "warmup_requests", "ppl_records", "budget_s")
    return {key: getattr(args, key) for key in keep} | {"sizes": [list(s) for s in args.sizes]}


# -- the summary ----------------------------------------------------------------


def read_records(path: Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def slope_per_hour(times: Sequence[float], values: Sequence[float]) -> tuple[float, float, float] | None:
    """Least-squares slope of ``values`` on ``times`` (seconds) per hour, with its 95 % interval."""
    n = len(times)
    if n < 3 or max(times) - min(times) <= 0:
        return None
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    sxx = sum((t - mean_t) ** 2 for t in times)
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / sxx
    residual = sum((v - mean_v - slope * (t - mean_t)) ** 2 for t, v in zip(times, values, strict=True))
    se = math.sqrt(residual / (n - 2) / sxx)
    half = t_quantile(0.975, n - 2) * se
    return slope * 3600, (slope - half) * 3600, (slope + half) * 3600


def _by_server(runs: Iterable[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    servers: dict[int, list[Mapping[str, Any]]] = {}
    for run in runs:
        servers.setdefault(int(run["server"]), []).append(run)
    return {key: sorted(value, key=lambda r: r["at_epoch"]) for key, value in sorted(servers.items())}


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The split per arm and size, the start-up per arm, and the arms' paired ratio per size."""
    runs = [r for r in records if r.get("kind") == "run" and r.get("tps")]
    out: dict[str, Any] = {"splits": [], "pairs": [], "starts": []}
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    sizes = list(dict.fromkeys(size_key(r["sizes"]) for r in runs))
    for arm in arms:
        starts = [r for r in records if r.get("kind") == "server" and r["arm"] == arm and r.get("ready_s")]
        if starts:
            phases: dict[str, list[float]] = {}
            for start in starts:
                for name, seconds in (start.get("start_phases") or {}).items():
                    phases.setdefault(name, []).append(seconds)
            out["starts"].append(
                {
                    "arm": arm,
                    "servers": len(starts),
                    "ready_s": statistics.fmean(s["ready_s"] for s in starts),
                    "phases": {name: statistics.fmean(values) for name, values in phases.items()},
                }
            )
        for size in sizes:
            servers = _by_server(r for r in runs if r["arm"] == arm and size_key(r["sizes"]) == size)
            groups = [[r["tps"] for r in group] for group in servers.values() if len(group) >= 2]
            if len(groups) < 2:
                continue
            split = nested_spread(groups)
            logs = [[math.log(v) for v in group] for group in groups]
            first_offset = statistics.fmean(g[0] - statistics.fmean(g[1:]) for g in logs)
            inside = [
                (r["at_epoch"], math.log(r["tps"]) - statistics.fmean(math.log(x["tps"]) for x in group))
                for group in servers.values()
                for r in group
            ]
            means = [
                (statistics.fmean(r["at_epoch"] for r in group), statistics.fmean(math.log(r["tps"]) for r in group))
                for group in servers.values()
            ]
            out["splits"].append(
                {
                    "arm": arm,
                    "size": size,
                    "mean_tps": math.exp(statistics.fmean(x for g in logs for x in g)),
                    "split": split.to_dict(),
                    "first_run_offset": first_offset,
                    "drift_between": slope_per_hour(*zip(*means, strict=True)),
                    "drift_inside": slope_per_hour(*zip(*inside, strict=True)),
                    "span_h": (max(t for t, _ in inside) - min(t for t, _ in inside)) / 3600,
                }
            )
    if len(arms) == 2:
        for size in sizes:
            a, b = (_by_server(r for r in runs if r["arm"] == arm and size_key(r["sizes"]) == size) for arm in arms)
            rounds = sorted(set(a) & set(b))
            pairs = [
                (
                    math.exp(statistics.fmean(math.log(r["tps"]) for r in a[i])),
                    math.exp(statistics.fmean(math.log(r["tps"]) for r in b[i])),
                )
                for i in rounds
            ]
            if len(pairs) >= 2:
                interval = paired_ratio_interval(pairs)
                out["pairs"].append(
                    {
                        "arms": arms,
                        "size": size,
                        "rounds": len(pairs),
                        "ratio": interval.value,
                        "low": interval.low,
                        "high": interval.high,
                        "pair_ratios": [x / y for x, y in pairs],
                    }
                )
    return out


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    lines = []
    for start in summary["starts"]:
        phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in start["phases"].items())
        lines.append(
            f"{start['arm']}: ready in {start['ready_s']:.1f} s on average over {start['servers']} servers ({phases})"
        )
    for row in summary["splits"]:
        split = row["split"]
        drift = row["drift_between"]
        inside = row["drift_inside"]
        lines.append(
            f"{row['arm']} {row['size']}: {split['servers']} servers x {split['runs_per_server']:.0f} runs, "
            f"mean {row['mean_tps']:.1f} tok/s; SD of log TPS between servers {split['between']:.3f}, "
            f"within a server {split['within']:.3f} ({split['within_low']:.3f}-{split['within_high']:.3f}), "
            f"a single run {split['single_run']:.3f}; within-server share {split['within_share']:.0%}; "
            f"servers' means SD {split['server_means_sd']:.3f} ({split['server_means_low']:.3f}-"
            f"{split['server_means_high']:.3f}), F-test p {split['f_p_value']:.3f}; first run {row['first_run_offset']:+.3f}"
            + (f"; drift between servers {drift[0]:+.3f}/h ({drift[1]:+.3f} to {drift[2]:+.3f})" if drift else "")
            + (f", inside {inside[0]:+.3f}/h ({inside[1]:+.3f} to {inside[2]:+.3f})" if inside else "")
            + f" over {row['span_h']:.2f} h"
        )
    for row in summary["pairs"]:
        lines.append(
            f"{row['arms'][0]} / {row['arms'][1]} at {row['size']}: {row['ratio']:.3f} "
            f"(95 % {row['low']:.3f}-{row['high']:.3f}) over {row['rounds']} interleaved rounds; "
            f"pairs {', '.join(f'{r:.3f}' for r in row['pair_ratios'])}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, help="the manifest (default: the CPU demo's)")
    parser.add_argument("--arm", type=parse_arm, action="append", help="LABEL[:shape=trial][:KEY=VALUE...]")
    parser.add_argument("--servers", type=int, default=4, help="fresh servers per arm (default 4)")
    parser.add_argument(
        "--runs",
        type=parse_runs,
        default=(4,),
        help="TPS runs in each server: one count for every size, or one a size (6,2) (default 4)",
    )
    parser.add_argument("--sizes", type=parse_sizes, default=((8, 128),), help="PROMPTSxTOKENS,... (default 8x128)")
    parser.add_argument("--warmup-requests", type=int, default=1, help="warm-up requests of each run (default 1)")
    parser.add_argument("--ppl-records", type=int, default=16, help="PPL records of a shape=trial server")
    parser.add_argument("--prompts", help="prompt set (default: the demo's tuning prompts, padded when short)")
    parser.add_argument("--ppl-data", help="PPL records (default: the demo's tuning records)")
    parser.add_argument("--budget-s", type=float, default=0.0, help="start no server that would end past this")
    parser.add_argument("--out", type=Path, default=Path("noise-split"), help="folder for the records and logs")
    parser.add_argument("--summary", type=Path, help="print the summary of a records file and exit")
    args = parser.parse_args(argv)
    if args.summary is not None:
        if not args.summary.is_file():
            parser.error(f"--summary: no file {args.summary}")
        summary = summarize(read_records(args.summary))
    else:
        args.manifest = args.manifest or demo_paths().manifest
        args.arm = args.arm or [Arm("base")]
        if len({a.label for a in args.arm}) != len(args.arm):
            parser.error("--arm: each arm needs a label of its own")
        if args.servers < 2:
            parser.error("--servers: at least 2, or nothing can be split")
        try:
            runs_per_size(args.runs, args.sizes)
        except argparse.ArgumentTypeError as error:
            parser.error(str(error))
        summary = summarize(read_records(measure(args)))
    for line in summary_lines(summary):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
