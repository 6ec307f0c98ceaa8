"""The GPU check: the sweep's serving path on a CUDA machine, measured, in parts that each fit one call.

    python benchmarks/gpu_check.py [--only info,serve,noise,ctk,eager] [--out DIR]

Every figure is appended to ``DIR/gpu_check.jsonl`` as soon as it is measured
(one JSON object a line, with the part, the UTC time and the figures), so a
machine lost halfway costs the part in progress and nothing before it;
``--summary`` prints the table of what a file holds. The parts:

- ``info``: GPU, driver, CUDA, torch and vLLM versions; memory in use at rest.
- ``serve``: one server of the GPU demo manifest: time to ready, PPL on the
  demo's tuning records, TPS and acceptance length at demo sizes, memory held.
- ``noise``: the same configuration in ``--servers`` fresh servers, each timed
  at demo sizes (8 x 128) and at the challenge's (128 x 512; the demo has
  48 prompts, so 48 x 512) in the same server, in alternating order: the
  spread between servers that a sweep's comparisons must beat.
- ``ctk``: mean acceptance length by CENTROID_TOP_K (``--top-k 1,8,32``),
  ``--repeats`` servers each, interleaved.
- ``eager``: eager against compiled (start time and TPS), interleaved.

GPU memory is read through NVML (``nvidia-ml-py``) where it is installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators import PplSettings, TpsSettings, WarmupSettings  # noqa: E402
from sweeper.demo import demo_paths  # noqa: E402
from sweeper.manifest import Manifest  # noqa: E402
from sweeper.measure import EvalSettings, evaluate, load_eval_data, measure_server  # noqa: E402
from sweeper.serving import ServerProcess  # noqa: E402
from sweeper.versions import software_versions  # noqa: E402

PARTS = ("info", "serve", "noise", "ctk", "eager")
DEMO_SIZES = (8, 128)
CHALLENGE_SIZES = (128, 512)


def parse_parts(text: str) -> tuple[str, ...]:
    """``"serve,noise"`` -> the parts in the order given; an unknown name is an error."""
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in PARTS]
    if unknown or not chosen:
        raise SystemExit(f"--only: unknown part(s) {unknown or text!r}; choose from {', '.join(PARTS)}")
    return chosen


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SystemExit(f"{option}: expected integers separated by commas, not {text!r}") from None
    if not values:
        raise SystemExit(f"{option}: no value given")
    return values


@dataclasses.dataclass(frozen=True)
class Spread:
    """What repeated figures of one configuration say about the noise."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def relative_range(self) -> float:
        """(max - min) / mean: the largest gap between two servers, as a share."""
        return (max(self.values) - min(self.values)) / self.mean

    @property
    def cv(self) -> float | None:
        """The coefficient of variation (None with fewer than 2 values)."""
        return statistics.stdev(self.values) / self.mean if len(self.values) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {"values": list(self.values), "mean": self.mean, "relative_range": self.relative_range,
                "cv": self.cv}  # fmt: skip


class Recorder:
    """Appends one JSON line per figure, flushed at once."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "gpu_check.jsonl"

    def write(self, part: str, **figures: Any) -> None:
        line = {"part": part, "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                **figures}  # fmt: skip
        with open(self.path, "a") as handle:
            handle.write(json.dumps(line, default=str) + "\n")
        print(json.dumps(line, default=str), flush=True)


def read_records(path: Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def summary_lines(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The figures a results file holds, one line each (for docs/gpu.md)."""
    lines = []
    noise: dict[str, list[float]] = {}
    acceptance: dict[int, list[float]] = {}
    for record in records:
        part = record.get("part")
        if part == "info":
            lines.append(f"info: {record.get('gpu')} driver {record.get('driver')} CUDA {record.get('cuda')}, "
                         f"torch {record.get('torch')}, vLLM {record.get('vllm')}")  # fmt: skip
        elif part == "serve":
            lines.append(f"serve: ready {record['ready_s']:.0f} s, PPL {record.get('ppl')}, "
                         f"{record.get('tps'):.1f} tok/s, acceptance {record.get('acceptance_length')}, "
                         f"{record.get('gpu_memory_mib')} MiB")  # fmt: skip
        elif part == "noise":
            noise.setdefault(str(record["sizes"]), []).append(float(record["tps"]))
        elif part == "ctk":
            acceptance.setdefault(int(record["top_k"]), []).append(float(record["acceptance_length"]))
        elif part == "eager":
            lines.append(f"eager={record['eager']}: ready {record['ready_s']:.0f} s, {record['tps']:.1f} tok/s")
    for sizes, values in noise.items():
        if len(values) > 1:
            spread = Spread(tuple(values))
            lines.append(f"noise {sizes}: {len(values)} servers, mean {spread.mean:.1f} tok/s, "
                         f"range {100 * spread.relative_range:.1f} %, cv {100 * (spread.cv or 0):.1f} %")  # fmt: skip
    for top_k, values in sorted(acceptance.items()):
        lines.append(f"ctk {top_k}: acceptance length {', '.join(f'{v:.2f}' for v in values)}")
    return lines


# -- GPU facts --------------------------------------------------------------


def _nvml() -> Any:
    """The initialized ``pynvml`` module, or None where NVML is missing (no package, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - ImportError or NVMLError_LibraryNotFound alike
        return None
    return pynvml


def nvml_used_mib() -> float | None:
    """Memory in use on GPU 0 (as this process sees it), or None without NVML."""
    pynvml = _nvml()
    if pynvml is None:
        return None
    try:
        index = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
    finally:
        pynvml.nvmlShutdown()


class PeakMemory:
    """Samples NVML's used memory in a thread; ``peak_mib`` once stopped."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            used = nvml_used_mib()
            if used is not None:
                self.peak_mib = used if self.peak_mib is None else max(self.peak_mib, used)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def gpu_info() -> dict[str, Any]:
    info: dict[str, Any] = dict(software_versions())
    try:
        import torch

        info["cuda"] = torch.version.cuda
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    pynvml = _nvml()
    info["driver"] = pynvml.nvmlSystemGetDriverVersion() if pynvml else None
    if pynvml:
        pynvml.nvmlShutdown()
    info["gpu_memory_used_mib"] = nvml_used_mib()
    return info


# -- measuring --------------------------------------------------------------


def settings_for(sizes: tuple[int, int], *, ppl: bool, log_path: Path, overrides: Mapping[str, str]) -> EvalSettings:
    num_prompts, output_len = sizes
    demo = demo_paths()
    return EvalSettings(
        prompts=str(demo.prompts_tuning),
        ppl_data=str(demo.ppl_tuning),
        tps=TpsSettings(num_prompts=num_prompts, output_len=output_len, warmup_requests=4),
        ppl=PplSettings() if ppl else None,
        warmup=WarmupSettings(),
        overrides=dict(overrides),
        ready_timeout_s=900.0,
        log_path=log_path,
    )


def measure(manifest: Manifest, sizes: tuple[int, int], out_dir: Path, label: str, *, ppl: bool = False,
            overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One fresh server: start, measure, stop; the figures that matter here."""
    log = out_dir / "logs" / f"{label}.log"
    with PeakMemory() as memory:
        result = evaluate(manifest, settings_for(sizes, ppl=ppl, log_path=log, overrides=overrides or {}))
    data = result.to_dict(details=False)
    return {
        "ready_s": data["timings"].get("ready"),
        "tps": data["tps"],
        "ppl": data["ppl"],
        "acceptance_length": data["mean_acceptance_length"],
        "gpu_memory_mib": memory.peak_mib,
        "sizes": list(sizes),
    }


def part_serve(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    recorder.write("serve", **measure(manifest, DEMO_SIZES, out, "serve", ppl=True))


def measure_sizes(manifest: Manifest, sizes_list: Sequence[tuple[int, int]], out_dir: Path,
                  label: str, on_figure: Callable[[dict[str, Any]], None]) -> None:
    """One fresh server timed at each of several sizes in turn (the warm-up bridge once);
    ``on_figure`` gets each size's figures as soon as they are measured."""
    log = out_dir / "logs" / f"{label}.log"
    with PeakMemory() as memory, ServerProcess(manifest, log_path=log, ready_timeout_s=900.0) as server:
        for index, sizes in enumerate(sizes_list):
            settings = settings_for(sizes, ppl=False, log_path=log, overrides={})
            if index:
                settings = dataclasses.replace(settings, warmup=WarmupSettings(enabled=False))
            result = measure_server(server.base_url, server.served_model_name,
                                    load_eval_data(manifest, settings), settings, warmup=settings.warmup)
            data = result.to_dict(details=False)
            on_figure({"sizes": list(sizes), "tps": data["tps"], "requests": data["completed"],
                       "output_tokens": data["output_tokens"], "duration_s": data["duration_s"],
                       "acceptance_length": data["mean_acceptance_length"],
                       "ready_s": server.ready_seconds, "gpu_memory_mib": memory.peak_mib})  # fmt: skip


def part_noise(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    for server in range(args.servers):
        order = (DEMO_SIZES, CHALLENGE_SIZES) if server % 2 == 0 else (CHALLENGE_SIZES, DEMO_SIZES)
        measure_sizes(manifest, order, out, f"noise-{server}",
                      lambda figures, server=server: recorder.write("noise", server=server, **figures))


def part_ctk(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    for repeat in range(args.repeats):
        order = args.top_k if repeat % 2 == 0 else tuple(reversed(args.top_k))
        for top_k in order:
            figures = measure(manifest, (16, 128), out, f"ctk-{top_k}-{repeat}",
                              overrides={"CENTROID_TOP_K": str(top_k)})  # fmt: skip
            recorder.write("ctk", top_k=top_k, repeat=repeat, **figures)


def part_eager(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    for repeat in range(args.repeats):
        for eager in (True, False) if repeat % 2 == 0 else (False, True):
            overrides = {"ENFORCE_EAGER": "1"} if eager else {}
            figures = measure(manifest, (16, 128), out, f"eager-{eager}-{repeat}", overrides=overrides)
            recorder.write("eager", eager=eager, repeat=repeat, **figures)


RUNNERS: dict[str, Callable[[Manifest, Path, Recorder, argparse.Namespace], None]] = {
    "serve": part_serve,
    "noise": part_noise,
    "ctk": part_ctk,
    "eager": part_eager,
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"parts to run ({', '.join(PARTS)})")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-check"), help="results folder")
    parser.add_argument("--manifest", help="default: the bundled GPU demo manifest")
    parser.add_argument("--servers", type=int, default=3, help="noise: fresh servers")
    parser.add_argument("--repeats", type=int, default=2, help="ctk / eager: servers per setting")
    parser.add_argument("--top-k", default="1,8,32", help="ctk: CENTROID_TOP_K values")
    parser.add_argument("--summary", metavar="FILE", help="print the summary of a results file and stop")
    args = parser.parse_args(argv)
    if args.summary:
        print("\n".join(summary_lines(read_records(Path(args.summary)))))
        return
    parts = parse_parts(args.only)
    args.top_k = parse_ints(args.top_k, "--top-k")
    out = Path(args.out)
    recorder = Recorder(out)
    manifest = Manifest.load(args.manifest or demo_paths().gpu_manifest)
    for part in parts:
        began = time.monotonic()
        try:
            if part == "info":
                recorder.write("info", **gpu_info())
            else:
                RUNNERS[part](manifest, out, recorder, args)
        except Exception as exc:  # noqa: BLE001 - a failed part is a figure too; the next part runs
            recorder.write("error", failed_part=part, error=f"{type(exc).__name__}: {exc}"[:4000])
        recorder.write("timing", timed_part=part, seconds=round(time.monotonic() - began, 1))


if __name__ == "__main__":
    main()
