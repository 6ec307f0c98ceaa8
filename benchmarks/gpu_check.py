"""The GPU check: the sweep's serving path on a CUDA machine, measured, in parts that each fit one call.

    python -m benchmarks.gpu_check [--only info,serve,startup,resume,noise,ctk,eager,fork] [--out DIR]

Every figure is appended to ``DIR/gpu_check.jsonl`` as soon as it is measured
(one JSON object a line, with the part, the UTC time and the figures), so a
machine lost halfway costs the part in progress and nothing before it;
``--summary`` prints the table of what a file holds. The parts:

- ``info``: GPU, driver, CUDA, torch and vLLM versions; memory in use at rest.
- ``serve``: one server of the GPU demo manifest: time to ready, PPL on the
  demo's tuning records, TPS and acceptance length at demo sizes, memory held.
- ``startup``: where a server's start-up goes (imports, weight load,
  torch.compile, CUDA-graph capture, to ready), read from the server log's
  timestamps, for the first server on the machine (``cold``), the same
  configuration again (``repeat``: vLLM's compile cache hit) and another
  sliding window (``window``); each server's demo-size trial time gives the
  trials per hour with and without a compile-cache hit. The two servers of
  the base configuration are also timed at ``--sizes`` and count as noise.
- ``resume``: a short ``sweeper run --gpus 0`` (no ``--manifest``: the demo
  picked for a GPU host) whose sweeper is SIGKILLed while a trial's server
  holds GPU memory; GPU memory (NVML) after the kill; the re-run resumes, and
  the trial table shows no trial lost or run twice.
- ``noise``: the same configuration in ``--servers`` fresh servers, each timed
  at ``--sizes`` (the demo's 8 x 128 and the challenge's 128 x 512, the
  demo's 64 prompts padded to 128 with reworded copies) in the same server,
  in alternating order: the spread between servers that a sweep's
  comparisons must beat. ``--budget-s`` starts no server that would not end
  within it.
- ``ctk``: mean acceptance length by CENTROID_TOP_K (``--top-k 1,8,32``),
  ``--repeats`` servers each, interleaved.
- ``eager``: eager against compiled (start time and TPS), interleaved.
- ``fork``: whether NVML (and vLLM's platform) can read the device's memory in
  a process forked after each parent state the warm launcher may leave
  (``benchmarks/fork_probe.py``: nothing, NVML opened and closed, NVML held,
  torch imported, torch's device count, vLLM's server imported), each case in
  a fresh interpreter. No server is started.

GPU memory is read through NVML (``nvidia-ml-py``) where it is installed.
SIGTERM (``timeout``) ends the script through its normal exits, so the server
in flight is stopped: a server left behind would hold about 43 GiB into the
next part.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.fork_probe import CASES as FORK_CASES
from benchmarks.fork_probe import first_visible_index
from evaluators import PplSettings, TpsSettings, WarmupSettings
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, evaluate, load_eval_data, measure_server
from sweeper.serving import ServerProcess, parse_startup
from sweeper.versions import software_versions

PARTS = ("info", "serve", "startup", "resume", "noise", "ctk", "eager", "fork")
DEMO_SIZES = (8, 128)
CHALLENGE_SIZES = (128, 512)
DEMO_PPL_RECORDS = 16  # as the GPU demo run measures PPL


def parse_parts(text: str) -> tuple[str, ...]:
    """``"serve,noise"`` -> the parts in the order given; an unknown name is an error."""
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in PARTS]
    if unknown or not chosen:
        raise SystemExit(f"--only: unknown part(s) {unknown or text!r}; choose from {', '.join(PARTS)}")
    return chosen


def parse_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``"8x128,128x512"`` -> ((8, 128), (128, 512))."""
    sizes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        prompts, sep, tokens = item.partition("x")
        if not (sep and prompts.isdigit() and tokens.isdigit() and int(prompts) > 0 and int(tokens) > 0):
            raise SystemExit(f"--sizes: expected PROMPTSxTOKENS[,...] such as 8x128, not {item!r}")
        sizes.append((int(prompts), int(tokens)))
    if not sizes:
        raise SystemExit("--sizes: no size given")
    return tuple(sizes)


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

    @property
    def log_sd(self) -> float | None:
        """The SD of log TPS between servers (about the relative SD; None with fewer than 2)."""
        return statistics.stdev(math.log(v) for v in self.values) if len(self.values) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": list(self.values),
            "mean": self.mean,
            "relative_range": self.relative_range,
            "cv": self.cv,
            "log_sd": self.log_sd,
        }


class Recorder:
    """Appends one JSON line per figure, flushed at once."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "gpu_check.jsonl"

    def write(self, part: str, **figures: Any) -> None:
        line = {
            "part": part,
            "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **figures,
        }
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
            lines.append(
                f"info: {record.get('gpu')} driver {record.get('driver')} CUDA {record.get('cuda')}, "
                f"torch {record.get('torch')}, vLLM {record.get('vllm')}"
            )
        elif part == "serve":
            lines.append(
                f"serve: ready {record['ready_s']:.0f} s, PPL {record.get('ppl')}, "
                f"{record.get('tps'):.1f} tok/s, acceptance {record.get('acceptance_length')}, "
                f"{record.get('gpu_memory_mib')} MiB"
            )
        elif part == "startup":
            phases = ", ".join(f"{name} {seconds:.0f}" for name, seconds in record.get("phases", {}).items())
            lines.append(
                f"startup {record['case']} (window {record.get('sliding_window')}): ready "
                f"{record['ready_s']:.0f} s = {phases}; compile {record.get('compile_s')} s, "
                f"cache hit {record.get('cache_hit')}; trial {record['trial_s']:.0f} s = "
                f"{record['trials_per_hour']:.0f} trials/h"
            )
        elif part == "startup-trial":
            phases = ", ".join(f"{name} {seconds:.0f}" for name, seconds in record.get("phases", {}).items())
            lines.append(
                f"startup of sweeper's {record['trial']}: {phases}; compile {record.get('compile_s')} s, "
                f"cache hit {record.get('cache_hit')} ({', '.join(record.get('cache_hashes', []))})"
            )
        elif part == "resume-kill":
            lines.append(
                f"resume: SIGKILL in trial {record['killed_trial']} at {record.get('gpu_memory_at_kill_mib')} "
                f"MiB (idle {record.get('idle_mib')}); freed after {record.get('freed_after_s')} s, "
                f"GPU processes left {record.get('pids_after')}"
            )
        elif part == "resume":
            lines.append(
                f"resume: re-run rc {record.get('rc')} in {record.get('rerun_s')} s; {record.get('complete')} "
                f"complete, killed trial now {record.get('killed_state_after')}, retried as "
                f"{record.get('killed_retried_as')}, lost {record.get('lost')}, run twice "
                f"{record.get('run_twice')}: {'ok' if record.get('ok') else 'NOT ok'}"
            )
        elif part == "noise":
            noise.setdefault(str(record["sizes"]), []).append(float(record["tps"]))
        elif part == "ctk":
            acceptance.setdefault(int(record["top_k"]), []).append(float(record["acceptance_length"]))
        elif part == "eager":
            lines.append(f"eager={record['eager']}: ready {record['ready_s']:.0f} s, {record['tps']:.1f} tok/s")
        elif part == "fork":
            lines.append(fork_line(record))
        elif part == "error":
            lines.append(f"error in {record.get('failed_part')}: {record.get('error', '')[:200]}")
    for sizes, values in noise.items():
        if len(values) > 1:
            spread = Spread(tuple(values))
            lines.append(
                f"noise {sizes}: {len(values)} servers, mean {spread.mean:.1f} tok/s, "
                f"range {100 * spread.relative_range:.1f} %, cv {100 * (spread.cv or 0):.1f} %, "
                f"sd of log TPS {spread.log_sd or 0:.3f}"
            )
    for top_k, values in sorted(acceptance.items()):
        lines.append(f"ctk {top_k}: acceptance length {', '.join(f'{v:.2f}' for v in values)}")
    return lines


def fork_line(record: Mapping[str, Any]) -> str:
    """One ``fork`` case: what the parent saw, and the forked child's NVML (and vLLM) query."""

    def shown(query: Any) -> str:
        if not isinstance(query, Mapping):
            return "not asked"
        return f"{query['gib']} GiB" if "gib" in query else f"failed ({str(query.get('error'))[:120]})"

    child = record.get("child") or {}
    text = f"fork {record.get('case')}: parent {json.dumps(record.get('parent') or {})}; child NVML {shown(child.get('nvml'))}"
    if "vllm" in child:
        text += f", vLLM's platform {shown(child['vllm'])}"
    return text


def trials_per_hour(trial_s: float) -> float:
    return 3600.0 / trial_s


# -- prompts at the challenge's size ------------------------------------------


def padded_prompts(sources: Sequence[Path], count: int, path: Path) -> Path:
    """A prompt file of ``count`` prompts: those of ``sources`` in turn, then reworded copies.

    A copy moves the first word of each human turn to its end, so it has the
    same length but another prefix (no prefix-cache hit on its original).
    """
    prompts: list[dict[str, Any]] = []
    for source in sources:
        prompts.extend(json.loads(Path(source).read_text()))
    if not prompts:
        raise SystemExit(f"no prompts in {', '.join(map(str, sources))}")
    chosen = list(prompts[:count])
    round_ = 1
    while len(chosen) < count:
        for prompt in prompts[: count - len(chosen)]:
            copy = json.loads(json.dumps(prompt))
            copy["id"] = f"{prompt.get('id', 'prompt')}-copy{round_}"
            for turn in copy.get("conversations", []):
                words = turn.get("value", "").split(" ")
                if turn.get("from") == "human" and len(words) > 1:
                    shift = round_ % len(words)
                    turn["value"] = " ".join(words[shift:] + words[:shift])
            chosen.append(copy)
        round_ += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chosen))
    return path


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
        handle = pynvml.nvmlDeviceGetHandleByIndex(first_visible_index())
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
    finally:
        pynvml.nvmlShutdown()


def nvml_pids() -> list[int]:
    """Processes holding memory on GPU 0 (empty without NVML)."""
    pynvml = _nvml()
    if pynvml is None:
        return []
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(first_visible_index())
        return sorted(process.pid for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception:  # noqa: BLE001 - a driver that cannot list processes
        return []
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


def settings_for(
    sizes: tuple[int, int],
    *,
    ppl: bool,
    log_path: Path,
    overrides: Mapping[str, str],
    prompts: Path | None = None,
    warmup_requests: int = 4,
    ppl_records: int | None = None,
) -> EvalSettings:
    num_prompts, output_len = sizes
    demo = demo_paths()
    return EvalSettings(
        prompts=str(prompts or demo.prompts_tuning),
        ppl_data=str(demo.ppl_tuning),
        tps=TpsSettings(num_prompts=num_prompts, output_len=output_len, warmup_requests=warmup_requests),
        ppl=PplSettings(max_records=ppl_records) if ppl else None,
        warmup=WarmupSettings(),
        overrides=dict(overrides),
        ready_timeout_s=900.0,
        log_path=log_path,
    )


def measure(
    manifest: Manifest,
    sizes: tuple[int, int],
    out_dir: Path,
    label: str,
    *,
    ppl: bool = False,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, Any]:
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


def prompts_for(sizes_list: Sequence[tuple[int, int]], out: Path) -> Path | None:
    """None where the demo's tuning prompts suffice, else a padded file of as many as asked."""
    wanted = max(prompts for prompts, _ in sizes_list)
    demo = demo_paths()
    if wanted <= len(json.loads(demo.prompts_tuning.read_text())):
        return None
    return padded_prompts((demo.prompts_tuning, demo.prompts_heldout), wanted, out / "work" / f"prompts-{wanted}.json")


def _write_noise(recorder: Recorder, server: int, figures: dict[str, Any]) -> None:
    """One noise server's figures, as the noise part records them."""
    recorder.write("noise", server=server, **figures)


def serve_and_time(
    manifest: Manifest,
    out_dir: Path,
    label: str,
    sizes_list: Sequence[tuple[int, int]],
    on_figure: Callable[[dict[str, Any]], None],
    *,
    overrides: Mapping[str, str] | None = None,
    trial_first: bool = False,
) -> dict[str, Any]:
    """One fresh server timed at each of several sizes in turn; ``on_figure`` gets each size's
    figures as soon as they are measured. With ``trial_first`` the first size is measured as
    a demo trial is (PPL on 16 records, one TPS warm-up request). Returns the server's
    ready and stop times, the first size's measuring time and the log."""
    log = out_dir / "logs" / f"{label}.log"
    prompts = prompts_for(sizes_list, out_dir)
    first_timings: dict[str, float] = {}
    server = ServerProcess(manifest, overrides=dict(overrides or {}), log_path=log, ready_timeout_s=900.0)
    with PeakMemory() as memory:
        with server:
            for index, sizes in enumerate(sizes_list):
                trial = trial_first and index == 0
                settings = settings_for(
                    sizes,
                    ppl=trial,
                    log_path=log,
                    overrides=overrides or {},
                    prompts=prompts,
                    warmup_requests=1 if trial else 4,
                    ppl_records=DEMO_PPL_RECORDS,
                )
                if index:
                    settings = dataclasses.replace(settings, warmup=WarmupSettings(enabled=False))
                timings: dict[str, float] = {}
                result = measure_server(
                    server.base_url,
                    server.served_model_name,
                    load_eval_data(manifest, settings),
                    settings,
                    warmup=settings.warmup,
                    timings=timings,
                )
                if index == 0:
                    first_timings = timings
                data = result.to_dict(details=False)
                on_figure(
                    {
                        "sizes": list(sizes),
                        "tps": data["tps"],
                        "ppl": data["ppl"],
                        "requests": data["completed"],
                        "output_tokens": data["output_tokens"],
                        "duration_s": data["duration_s"],
                        "acceptance_length": data["mean_acceptance_length"],
                        "ready_s": server.ready_seconds,
                        "gpu_memory_mib": memory.peak_mib,
                    }
                )
            stopping = time.monotonic()
        stop_s = time.monotonic() - stopping
    return {
        "ready_s": server.ready_seconds,
        "stop_s": round(stop_s, 2),
        "measure_s": round(sum(first_timings.values()), 2),
        "log": log,
    }


def compile_cache_dir() -> Path:
    root = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm"
    )
    return Path(root) / "torch_compile_cache"


def part_startup(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    """cold, repeat (same configuration), window (another sliding window): where each start-up goes."""
    cache = compile_cache_dir()
    recorder.write(
        "startup-cache",
        cache_dir=str(cache),
        entries_before=sorted(p.name for p in cache.glob("*")) if cache.is_dir() else [],
    )
    base = manifest.env.get("SLIDING_WINDOW")
    cases: tuple[tuple[str, dict[str, str]], ...] = (
        ("cold", {}),
        ("repeat", {}),
        ("window", {"SLIDING_WINDOW": str(args.new_window)}),
    )
    for case, overrides in cases:
        sizes_list = (DEMO_SIZES, *(s for s in args.sizes if s != DEMO_SIZES)) if not overrides else (DEMO_SIZES,)
        figures: list[dict[str, Any]] = []

        def on_figure(
            found: dict[str, Any],
            case: str = case,
            overrides: dict[str, str] = overrides,
            figures: list[dict[str, Any]] = figures,
        ) -> None:
            figures.append(found)
            if not overrides:  # the base configuration in a fresh server: a noise figure too
                recorder.write("noise", server=f"startup-{case}", **found)

        served = serve_and_time(
            manifest, out, f"startup-{case}", sizes_list, on_figure, overrides=overrides, trial_first=True
        )
        startup = parse_startup(served["log"].read_text(errors="replace"), served["ready_s"])
        trial_s = served["ready_s"] + served["measure_s"] + served["stop_s"]
        recorder.write(
            "startup",
            case=case,
            sliding_window=overrides.get("SLIDING_WINDOW", base),
            trial_s=round(trial_s, 1),
            trials_per_hour=round(trials_per_hour(trial_s), 1),
            measure_s=served["measure_s"],
            stop_s=served["stop_s"],
            demo_tps=figures[0]["tps"] if figures else None,
            **startup.to_dict(),
        )


# -- SIGKILL of the sweeper and the resume -------------------------------------


def trial_table(storage: str, study_name: str) -> list[dict[str, Any]]:
    """Every trial of the study: number, Optuna state, params, sweeper's role and retry marks."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=storage)
    return [
        {
            "number": trial.number,
            "state": trial.state.name,
            "params": trial.params,
            "role": trial.user_attrs.get("sweeper:role"),
            "retry_of": trial.user_attrs.get("sweeper:retry_of"),
            "values": trial.values,
        }
        for trial in study.get_trials(deepcopy=False)
    ]


def resume_verdict(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], killed: int, n_trials: int
) -> dict[str, Any]:
    """Did the re-run resume the study with no trial lost and none run twice?

    ``before``: the trial table right after the SIGKILL (``killed`` still RUNNING
    there); ``after``: once the re-run ended. Lost: a trial complete before the
    kill that is not complete after it, or a killed configuration never measured;
    twice: one configuration complete in two trials.
    """
    done_before = {t["number"] for t in before if t["state"] == "COMPLETE"}
    complete = [t for t in after if t["state"] == "COMPLETE"]
    by_number = {t["number"]: t for t in after}
    lost = sorted(n for n in done_before if by_number.get(n, {}).get("state") != "COMPLETE")
    killed_params = next((t["params"] for t in before if t["number"] == killed), None)
    retries = [t for t in complete if t.get("retry_of") == killed]
    configs = [json.dumps(t["params"], sort_keys=True) for t in complete]
    twice = sorted({c for c in configs if configs.count(c) > 1})
    killed_measured = killed_params is not None and any(t["params"] == killed_params for t in complete)
    return {
        "killed_state_after": by_number.get(killed, {}).get("state"),
        "killed_retried_as": [t["number"] for t in retries],
        "complete": len(complete),
        "lost": lost + ([] if killed_measured else [killed]),
        "run_twice": twice,
        "ok": not lost and killed_measured and not twice and len(complete) >= n_trials,
    }


def _follow(process: subprocess.Popen[str], log: Path, lines: list[str]) -> threading.Thread:
    def copy() -> None:
        with open(log, "a") as handle:
            for line in process.stdout or ():
                handle.write(line)
                handle.flush()
                lines.append(line)

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def part_resume(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    work = out / "work" / "resume"
    work.mkdir(parents=True, exist_ok=True)
    storage, study = f"sqlite:///{work / 'study.db'}", "gpu-resume"
    command = [
        sys.executable,
        "-m",
        "sweeper",
        "run",
        "--storage",
        storage,
        "--study",
        study,
        "--n-trials",
        str(args.resume_trials),
        "--gpus",
        "0",
        "--plain",
        "--run-dir",
        str(work / "runs"),
        "--ppl-records",
        str(DEMO_PPL_RECORDS),
    ]
    log = out / "logs" / "resume-run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    idle = nvml_used_mib() or 0.0
    recorder.write("resume-start", gpu_memory_mib=idle, command=" ".join(command[1:]))
    lines: list[str] = []
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = _follow(first, log, lines)
    marker = f"trial {args.kill_trial}: starting the server"
    deadline = time.monotonic() + args.kill_within_s
    while time.monotonic() < deadline and first.poll() is None and not any(marker in line for line in lines):
        time.sleep(0.2)
    held, seen = None, time.monotonic()
    at_marker = nvml_used_mib()  # a server of an earlier trial or run may still hold memory at the start
    if at_marker is not None:
        idle = min(idle, at_marker)
    while time.monotonic() < deadline and first.poll() is None:  # kill once its server holds GPU memory
        held = nvml_used_mib()
        if held is not None and held > idle + args.held_mib:
            break
        if held is None and time.monotonic() - seen > args.kill_after_s:  # no NVML: kill after a while
            break
        time.sleep(0.25)
    if first.poll() is not None:
        raise RuntimeError(f"the sweeper ended (rc {first.returncode}) before trial {args.kill_trial} held memory")
    pids_at_kill = nvml_pids()
    first.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    first.wait()
    readings = []
    freed_after = None
    while time.monotonic() - killed_at < 60:
        used = nvml_used_mib()
        since = round(time.monotonic() - killed_at, 2)
        readings.append((since, used))
        if used is None:  # no NVML: nothing to watch
            break
        if used <= idle + 256:
            freed_after = since
            break
        time.sleep(0.25)
    reader.join(timeout=5)
    before = trial_table(storage, study)
    recorder.write(
        "resume-kill",
        killed_trial=args.kill_trial,
        gpu_memory_at_kill_mib=held,
        idle_mib=idle,
        pids_at_kill=pids_at_kill,
        memory_after_kill=readings[:8] + readings[-2:],
        freed_after_s=freed_after,
        pids_after=nvml_pids(),
        trials=[{k: t[k] for k in ("number", "state", "params")} for t in before],
    )
    lines.clear()
    with open(log, "a") as handle:
        handle.write("\n=== the same command again ===\n")
    began = time.monotonic()
    again = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = _follow(again, log, lines)
    again.wait(timeout=args.budget_s)
    reader.join(timeout=5)
    after = trial_table(storage, study)
    notes = [line.strip() for line in lines if re.search(r"stale|again|resum|recover|worker start", line, re.I)]
    recorder.write(
        "resume",
        rc=again.returncode,
        rerun_s=round(time.monotonic() - began, 1),
        **resume_verdict(before, after, args.kill_trial, args.resume_trials),
        trials=after,
        notes=notes[:12],
    )
    for server_log in sorted((work / "runs").glob("*/trial-*/server.log")):
        startup = parse_startup(server_log.read_text(errors="replace"))
        recorder.write("startup-trial", trial=server_log.parent.name, **startup.to_dict())


def part_noise(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    began, longest = time.monotonic(), 0.0
    for server in range(args.servers):
        if time.monotonic() - began + longest * 1.2 > args.budget_s:
            recorder.write("noise-skipped", server=server, reason=f"would end past --budget-s {args.budget_s}")
            break
        order = args.sizes if server % 2 == 0 else tuple(reversed(args.sizes))
        started = time.monotonic()
        serve_and_time(
            manifest,
            out,
            f"noise-{server}",
            order,
            functools.partial(_write_noise, recorder, server),
        )
        longest = max(longest, time.monotonic() - started)


def part_ctk(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    for repeat in range(args.repeats):
        order = args.top_k if repeat % 2 == 0 else tuple(reversed(args.top_k))
        for top_k in order:
            figures = measure(
                manifest, (16, 128), out, f"ctk-{top_k}-{repeat}", overrides={"CENTROID_TOP_K": str(top_k)}
            )
            recorder.write("ctk", top_k=top_k, repeat=repeat, **figures)


def part_fork(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    """Each case of ``benchmarks/fork_probe.py`` in a fresh interpreter (the manifest is not used)."""
    root = Path(__file__).resolve().parent.parent
    for case in FORK_CASES:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.fork_probe", case],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            recorder.write("fork", case=case, rc=done.returncode, error=done.stderr[-2000:])
            continue
        recorder.write("fork", **json.loads(lines[-1]))


def part_eager(manifest: Manifest, out: Path, recorder: Recorder, args: argparse.Namespace) -> None:
    for repeat in range(args.repeats):
        for eager in (True, False) if repeat % 2 == 0 else (False, True):
            overrides = {"ENFORCE_EAGER": "1"} if eager else {}
            figures = measure(manifest, (16, 128), out, f"eager-{eager}-{repeat}", overrides=overrides)
            recorder.write("eager", eager=eager, repeat=repeat, **figures)


RUNNERS: dict[str, Callable[[Manifest, Path, Recorder, argparse.Namespace], None]] = {
    "serve": part_serve,
    "startup": part_startup,
    "resume": part_resume,
    "noise": part_noise,
    "ctk": part_ctk,
    "eager": part_eager,
    "fork": part_fork,
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"parts to run ({', '.join(PARTS)})")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-check"), help="results folder")
    parser.add_argument("--manifest", help="default: the bundled GPU demo manifest")
    parser.add_argument("--servers", type=int, default=3, help="noise: fresh servers")
    parser.add_argument("--sizes", default="8x128,128x512", help="noise, startup: PROMPTSxTOKENS timed in each server")
    parser.add_argument("--budget-s", type=float, default=540.0, help="noise, resume: seconds the part may take")
    parser.add_argument("--new-window", type=int, default=20, help="startup: the other sliding window")
    parser.add_argument("--resume-trials", type=int, default=2, help="resume: the study's --n-trials")
    parser.add_argument("--kill-trial", type=int, default=1, help="resume: SIGKILL during this trial")
    parser.add_argument("--kill-within-s", type=float, default=300.0, help="resume: give up waiting after this")
    parser.add_argument(
        "--kill-after-s", type=float, default=20.0, help="resume without NVML: kill this long into the trial"
    )
    parser.add_argument("--held-mib", type=float, default=2048.0, help="resume: memory over idle that means held")
    parser.add_argument("--repeats", type=int, default=2, help="ctk / eager: servers per setting")
    parser.add_argument("--top-k", default="1,8,32", help="ctk: CENTROID_TOP_K values")
    parser.add_argument("--summary", metavar="FILE", help="print the summary of a results file and stop")
    args = parser.parse_args(argv)
    if args.summary:
        print("\n".join(summary_lines(read_records(Path(args.summary)))))
        return
    parts = parse_parts(args.only)
    args.top_k = parse_ints(args.top_k, "--top-k")
    args.sizes = parse_sizes(args.sizes)
    # a `timeout` or a stopped call sends SIGTERM: unwind, so the server in flight is stopped and frees the GPU
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        run_parts(parts, args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_parts(parts: Sequence[str], args: argparse.Namespace) -> None:
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
