"""Our TPS against the challenge harness's own client, whole runs, alternating on one server.

Each round runs the harness's client (sglang 0.5.2's ``bench_serving.py``,
as a script, with the harness's flags) and ``evaluators.measure_tps`` (with
its defaults, through ``tps_ours_client.py``), each in a process of its
own as the harness runs its client: the harness first in even rounds, ours
first in odd ones. With ``--ours-connection harness,keep-alive`` ours runs
once per protocol in every round (sides ``ours`` and ``ours:keep-alive``),
and the order turns one place a round, so each side takes each place once
in three rounds. ``--ours-idle-s S`` adds a side ``ours:idle``: ours's
first protocol after S seconds of waiting before its warm-up, so that the
server idles before the run as long as it does while the harness's client
starts (about 8.5 s longer than ours takes). For every run it records the TPS, the client-side time
between requests (wall clock less the sum of the request latencies; ours
also per gap, from measure_tps's per-request end times), the server's
``/metrics`` counters before and after (requests, end-to-end, queue,
prefill, decode and inter-token time sums, tokens, acceptance; the
clients' 4 warm-up requests are inside), the client process's CPU time
(all of it from ``os.wait4``, and that of its last ``duration`` seconds
from ``/proc/<pid>/stat`` read every 0.25 s), the server process tree's
CPU time and the host's busy CPU. It prints a table per size and the geometric mean of
ours / harness with a 95 % interval (t on the log ratios), and writes
everything to ``--out`` (JSON, rewritten after every run). With
``--probe-log`` (``host_probe.py``'s output) each run also gets the probe's
means over its timed window, and each size the host's state before its
first round and during its rounds (``parity.host_state``: the probe's
``cpu_ms`` median and quartiles, quiet or busy), so a session on a busy
host is known as one before it has spent its rounds.

The client's file, without installing sglang (it imports nothing of
sglang; it needs aiohttp, numpy, requests, tqdm and transformers)::

    wheel=$(mktemp -d)
    python -m pip download --no-deps sglang==0.5.2 -d "$wheel"
    unzip -o -j "$wheel"/sglang-0.5.2-py3-none-any.whl sglang/bench_serving.py -d .harness-client
    echo /.harness-client/ >> .git/info/exclude   # another project's code: never committed

then::

    python benchmarks/tps_vs_harness_client.py --client-script .harness-client/bench_serving.py \\
        [--manifest M | --base-url URL --model NAME] [--sizes 128x512,48x128] [--rounds 6] \\
        [--budget-s 480] [--work-dir DIR] [--out OUT.json]

Without ``--base-url`` it starts a server of ``--manifest`` (default: the
bundled CPU demo) and stops it at the end; with it, it measures that
server (``--server-pid`` for its CPU time). ``--client-python`` is the
interpreter that runs the script (default: this one); without
``--client-script`` it runs ``-m sglang.bench_serving`` in that
interpreter (a venv with sglang installed). The client runs with
``HF_HUB_OFFLINE=1`` and the model's local tokenizer.

The harness's flags: ``--backend vllm-chat --disable-stream --dataset-name
sharegpt --max-concurrency 1 --request-rate inf --warmup-requests 4 --seed 1
--extra-request-body '{"ignore_eos": true}'`` (plus the sizes, and
``--output-file --output-details`` for its per-request record). The
prompts are the demo's, written as ShareGPT records with an answer turn
(its loader drops records of one turn): the 48 tuning prompts up to 48, and
for more the tuning and held-out prompts (64) and then the same with the
words reversed (``parity.extend_prompts``). Both clients read the same file
and send it in the same seeded order.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import parity  # noqa: E402

from evaluators import TpsSettings, load_prompts  # noqa: E402
from evaluators.spec_metrics import parse_metrics  # noqa: E402
from evaluators.tps import CONNECTIONS, select_prompts  # noqa: E402
from sweeper.demo import demo_paths  # noqa: E402
from sweeper.manifest import Manifest  # noqa: E402
from sweeper.serving import ServerProcess  # noqa: E402

OURS_CLIENT = Path(__file__).resolve().parent / "tps_ours_client.py"
HARNESS_FLAGS = [
    "--backend",
    "vllm-chat",
    "--dataset-name",
    "sharegpt",
    "--disable-stream",
    "--max-concurrency",
    "1",
    "--request-rate",
    "inf",
    "--warmup-requests",
    "4",
    "--seed",
    "1",
    "--extra-request-body",
    json.dumps({"ignore_eos": True}),
]
# the host probe's figures (host_probe.py), and the time the harness's client takes from its timer's
# end to its output file (its metrics and printing): its requests' unix times are counted back from it
PROBE_KEYS = ("cpu_ms", "mem_ms", "gpu_ms")
HARNESS_WRITE_S = 0.2


def parse_size(text: str) -> tuple[int, int]:
    try:
        prompts, tokens = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is PROMPTSxTOKENS (128x512), not {text!r}") from None
    return prompts, tokens


def server_counters(base_url: str) -> dict[str, float]:
    return parity.counters_from_samples(parse_metrics(httpx.get(f"{base_url}/metrics", timeout=30).text))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChildRun:
    """A client process: exit code, wall and CPU seconds (``os.wait4``), CPU read every ~0.25 s."""

    exit_code: int
    wall_s: float
    cpu_s: float
    cpu_samples: tuple[tuple[float, float], ...]


class ServerWatch:
    """The server's busy threads while a client runs: the CPU each ran on, its share of it, that CPU's clock.

    Called about once a second; a thread counts as busy in an interval when it used at
    least 5 % of a core. A slow stretch of the server (``print_speed_map``) can then be
    laid beside where its threads ran and how fast those cores were clocked.
    """

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.samples: list[dict[str, Any]] = []
        self._last: tuple[float, dict[int, float]] | None = None
        self._pids: set[int] = set()

    def __call__(self, now: float) -> None:
        if self.server_pid is None:
            return
        if not self._pids or len(self.samples) % 30 == 0:  # the tree rarely changes: rescan now and then
            self._pids = parity.process_tree(self.server_pid)
        states = parity.thread_states(self._pids)
        clocks = parity.core_mhz()
        cpu = {t.tid: t.cpu_s for t in states}
        if self._last is not None:
            then, before = self._last
            busy = []
            for t in states:
                share = (t.cpu_s - before.get(t.tid, t.cpu_s)) / max(now - then, 1e-6)
                if share >= 0.05:
                    busy.append([t.tid, t.name, t.processor, round(share, 3), clocks.get(t.processor)])
            self.samples.append({"t": round(now, 2), "busy": busy})
        self._last = (now, cpu)

    def summary(self) -> dict[str, Any]:
        """The busiest thread: its name, the CPUs it ran on (share of samples each), its median clock."""
        totals: dict[int, float] = {}
        for sample in self.samples:
            for tid, _, _, share, _ in sample["busy"]:
                totals[tid] = totals.get(tid, 0.0) + share
        if not totals:
            return {}
        top = max(totals, key=totals.__getitem__)
        seen = [b for sample in self.samples for b in sample["busy"] if b[0] == top]
        cores: dict[int, int] = {}
        for b in seen:
            cores[b[2]] = cores.get(b[2], 0) + 1
        clocks = [b[4] for b in seen if b[4] is not None]
        return {
            "tid": top,
            "name": seen[0][1],
            "mean_share": totals[top] / max(len(self.samples), 1),
            "cores": {str(c): n / len(seen) for c, n in sorted(cores.items())},
            "median_mhz": statistics.median(clocks) if clocks else None,
        }


def run_child(
    command: list[str], log: Path, timeout_s: float, env: dict[str, str], watch: ServerWatch | None = None
) -> ChildRun:
    """Run ``command`` with its output to ``log``, reading its CPU time (and ``watch``, ~1/s) while it runs."""
    began = time.perf_counter()
    samples: list[tuple[float, float]] = []
    with log.open("w") as sink:
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=log.parent)
        deadline = time.monotonic() + timeout_s
        next_sample = next_watch = 0.0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter() - began
            if now >= next_sample:
                cpu = parity.process_cpu_s(child.pid)
                if cpu is not None:
                    samples.append((now, cpu))
                next_sample = now + 0.25
            if watch is not None and now >= next_watch:
                watch(now)
                next_watch = now + 1.0
            if time.monotonic() > deadline:
                child.kill()
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
    return ChildRun(
        exit_code=child.returncode,
        wall_s=time.perf_counter() - began,
        cpu_s=usage.ru_utime + usage.ru_stime,
        cpu_samples=tuple(samples),
    )


class Bench:
    """One server, one size: runs a side and returns its record."""

    def __init__(
        self,
        args: argparse.Namespace,
        base_url: str,
        model: str,
        server_pid: int | None,
        tokenizer: str,
        dataset: Path,
        size: tuple[int, int],
        workdir: Path,
    ) -> None:
        self.args, self.base_url, self.model, self.server_pid = args, base_url, model, server_pid
        self.sides = ours_sides(args.ours_connection, args.ours_idle_s)
        self.tokenizer, self.dataset, self.workdir = tokenizer, dataset, workdir
        self.num_prompts, self.output_len = size
        self.timeout_s = 120 + self.num_prompts * (30 + 0.1 * self.output_len)
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

    def harness_command(self, result: Path) -> list[str]:
        python = self.args.client_python or sys.executable
        head = [python, self.args.client_script] if self.args.client_script else [python, "-m", "sglang.bench_serving"]
        return [
            *head,
            *HARNESS_FLAGS,
            "--base-url",
            self.base_url,
            "--model",
            self.model,
            "--tokenizer",
            self.tokenizer,
            "--dataset-path",
            str(self.dataset),
            "--num-prompts",
            str(self.num_prompts),
            "--sharegpt-output-len",
            str(self.output_len),
            "--output-file",
            str(result),
            "--output-details",
            "--disable-tqdm",
        ]

    def ours_command(self, result: Path, side: OursSide) -> list[str]:
        return [
            sys.executable,
            str(OURS_CLIENT),
            "--base-url",
            self.base_url,
            "--model",
            self.model,
            "--prompts",
            str(self.dataset),
            "--num-prompts",
            str(self.num_prompts),
            "--output-len",
            str(self.output_len),
            "--connection",
            side.connection,
            "--idle-before-s",
            str(side.idle_before_s),
            "--out",
            str(result),
        ]

    def run(self, side: str, tag: str) -> dict[str, Any]:
        result = self.workdir / f"{tag}-{side.replace(':', '-')}.json"
        result.unlink(missing_ok=True)
        if side == "harness":
            command = self.harness_command(result)
        else:
            command = self.ours_command(result, self.sides[side])
        counters = server_counters(self.base_url)
        started_at = time.time()
        host = parity.host_cpu_jiffies()
        server_cpu = parity.process_tree_cpu_s(self.server_pid) if self.server_pid else None
        log = self.workdir / f"{tag}-{side.replace(':', '-')}.log"
        watch = ServerWatch(self.server_pid)
        child = run_child(command, log, self.timeout_s, self.env, watch)
        code, wall, cpu = child.exit_code, child.wall_s, child.cpu_s
        host_after = parity.host_cpu_jiffies()
        server_cpu = parity.process_tree_cpu_s(self.server_pid) - server_cpu if self.server_pid else None
        served = parity.counter_delta(counters, server_counters(self.base_url))
        ticks = os.sysconf("SC_CLK_TCK")
        row: dict[str, Any] = {
            "side": side,
            "started_at": started_at,
            "ended_at": time.time(),
            "exit_code": code,
            "process_wall_s": wall,
            "client_cpu_s": cpu,
            "server_cpu_s": server_cpu,
            "host_busy_cores": (host_after[0] - host[0]) / ticks / wall,
            "host_busy_share": (host_after[0] - host[0]) / max(host_after[1] - host[1], 1),
            "load": os.getloadavg()[0],
            "server": served,
            "command": command[1:],
            "cpu_samples": [list(s) for s in child.cpu_samples],
            "server_threads": watch.samples,
            "server_busiest_thread": watch.summary(),
        }
        if code != 0 or not result.exists():
            tail = log.read_text()[-3000:]
            return {**row, "ok": False, "error": f"exit code {code}: {tail}"}
        if side == "harness":
            run = parity.parse_harness_result(result.read_text())
            row |= {
                "ok": run.completed == self.num_prompts and not run.errors,
                "tps": run.tps,
                "duration_s": run.duration_s,
                "latencies_s": list(run.latencies_s),
                "output_lens": list(run.output_lens),
                "input_lens": list(run.input_lens),
                "errors": list(run.errors)[:3],
            }
            # the client writes its file just after its timer stops (its metrics and printing take a
            # fraction of a second), and its requests run back to back: their unix times, to ~0.5 s
            ended = result.stat().st_mtime - HARNESS_WRITE_S
            row["request_starts_unix"] = parity.request_starts_backwards(ended, run.duration_s, run.latencies_s)
        else:
            data = json.loads(result.read_text())
            measured = data["result"]
            requests = measured["requests"]
            latencies = [r["latency_s"] for r in requests]
            gaps = (
                parity.gaps_between(data["request_ends_s"], latencies)
                if len(data["request_ends_s"]) == len(latencies)
                else []
            )
            row |= {
                "ok": measured["tps"] is not None,
                "tps": measured["tps"],
                "duration_s": measured["duration_s"],
                "latencies_s": latencies,
                "output_lens": [r["output_tokens"] for r in requests],
                "input_lens": [r["prompt_tokens"] for r in requests],
                "prompt_ids": [r["prompt_id"] for r in requests],
                "gaps_between_s": gaps,
                "child_self_cpu_s": data["self_cpu_s"],
                "child_process_s": data["process_s"],
                "child_window_cpu_s": data.get("window_cpu_s"),
                "idle_before_s": data.get("idle_before_s", 0.0),
            }
            if "started_unix" in data and len(data["request_ends_s"]) == len(latencies):
                row["request_starts_unix"] = [
                    data["started_unix"] + end - latency for end, latency in zip(data["request_ends_s"], latencies)
                ]
        row |= parity.gap_summary(row["duration_s"], row["latencies_s"])
        window = timed_window(row)
        if self.args.probe_log and window:
            # the host probe's figures over this run's timed window (a covariate: host_probe.py)
            start, end = window
            lines = parity.load_probe(self.args.probe_log)
            row["probe"] = {key: parity.probe_mean(lines, key, start, end) for key in PROBE_KEYS}
        # both sides alike: the CPU of the client's last `duration` seconds (its timed window and what it
        # does after it: printing and writing its result)
        row["client_window_cpu_s"] = parity.cpu_in_last(child.cpu_samples, wall, row["duration_s"], cpu)
        return row


def timed_window(row: dict[str, Any]) -> tuple[float, float] | None:
    """A run's timed window in unix times: its first request's start to its last one's end (None unknown)."""
    starts = row.get("request_starts_unix")
    return (starts[0], starts[-1] + row["latencies_s"][-1]) if starts else None


def describe_run(row: dict[str, Any]) -> str:
    if not row.get("ok") or row.get("tps") is None:
        return f"  {row['side']:<8} FAILED: {row.get('error', 'not every request completed')[-600:]}"
    served = row["server"]
    return (
        f"  {row['side']:<8} {row['tps']:8.2f} tok/s; {len(row['latencies_s'])} requests, "
        f"{sum(row['output_lens'])} tokens in {row['duration_s']:.2f} s, between requests "
        f"{row['gap_per_request_ms']:.2f} ms each; client CPU {row['client_cpu_s']:.2f} s in "
        f"{row['process_wall_s']:.1f} s, {row['client_window_cpu_s']:.2f} s in its timed window; server: {served['requests']:.0f} requests (warm-up included), "
        f"e2e {per_measured(row, 'e2e_s'):.1f} ms, decode {per_measured(row, 'decode_s'):.1f} ms each, "
        f"{served['generation_tokens']:.0f} generated, {served['accepted'] / max(served['drafts'], 1):.3f} "
        f"accepted per draft; host busy {row['host_busy_cores']:.2f} cores{describe_thread(row)}"
        f"{describe_probe(row)}"
    )


def describe_probe(row: dict[str, Any]) -> str:
    seen = {key: value for key, value in (row.get("probe") or {}).items() if value}
    return "; probe " + ", ".join(f"{key} {value:.3f}" for key, value in seen.items()) if seen else ""


def describe_thread(row: dict[str, Any]) -> str:
    top = row.get("server_busiest_thread") or {}
    if not top:
        return ""
    cores = ", ".join(f"{c}: {share:.0%}" for c, share in sorted(top["cores"].items(), key=lambda kv: -kv[1])[:4])
    clock = f", {top['median_mhz']:.0f} MHz" if top.get("median_mhz") else ""
    return f"; server's busiest thread {top['name']} ({top['mean_share']:.2f} of a core) on CPU {cores}{clock}"


def per_measured(row: dict[str, Any], key: str) -> float:
    """A server time sum per request (ms), the warm-up's requests included in the count."""
    return parity.ms_per_request(row["server"], key)


@dataclasses.dataclass(frozen=True)
class OursSide:
    """How one of our sides measures: ``measure_tps``'s connection protocol, and the idle before its warm-up."""

    connection: str
    idle_before_s: float = 0.0


def ours_sides(connections: str, idle_s: float | None = None) -> dict[str, OursSide]:
    """``harness,keep-alive`` -> sides ``ours`` (harness) and ``ours:keep-alive``; ``idle_s`` adds ``ours:idle``.

    ``ours:idle`` measures with the first protocol after ``idle_s`` seconds of the server idle.
    """
    wanted = [c.strip() for c in connections.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CONNECTIONS]
    if not wanted or unknown or len(set(wanted)) < len(wanted):
        raise argparse.ArgumentTypeError(
            f"--ours-connection: one or more of {', '.join(CONNECTIONS)}, each once, not {connections!r}"
        )
    sides = {("ours" if i == 0 else f"ours:{c}"): OursSide(c) for i, c in enumerate(wanted)}
    if idle_s is not None:
        if not 0 < idle_s <= 600:
            raise argparse.ArgumentTypeError(f"--ours-idle-s: more than 0 and at most 600 seconds, not {idle_s}")
        sides["ours:idle"] = OursSide(wanted[0], idle_s)
    return sides


def size_summary(rounds: list[dict[str, Any]], side: str = "ours", against: str = "harness") -> dict[str, Any]:
    """``side`` / ``against`` over the rounds where both completed (tok/s, the server's times, tokens)."""
    done = [r for r in rounds if r.get(side, {}).get("ok") and r.get(against, {}).get("ok")]
    ratios = [r[side]["tps"] / r[against]["tps"] for r in done]
    summary: dict[str, Any] = {"rounds": len(rounds), "complete_rounds": len(done), "ratios": ratios}
    if ratios:
        summary["ratio"] = parity.ratio_summary(ratios).__dict__
        summary["same_tokens"] = all(sum(r[side]["output_lens"]) == sum(r[against]["output_lens"]) for r in done)
        # the harness counts the raw prompt, ours the chat-templated one: the same prompts in the same
        # order differ by one constant
        offsets = {o - h for r in done for o, h in zip(r[side]["input_lens"], r[against]["input_lens"])}
        summary["prompt_token_offsets"] = sorted(offsets)
        server_ratios = {
            key: [per_measured(r[side], key) / per_measured(r[against], key) for r in done]
            for key in ("e2e_s", "decode_s")
        }
        for key, by_round in server_ratios.items():
            summary[f"server_{key}_ratio"] = parity.ratio_summary(by_round).__dict__
        # the TPS ratio had the server been as fast in both runs: times the server's own time ratio, what
        # is left is the ratio of what lies outside the server (the clients, the API path, the gaps)
        summary["equal_server_time_ratio"] = parity.ratio_summary(
            [ratio * server for ratio, server in zip(ratios, server_ratios["e2e_s"])]
        ).__dict__
        # the ratio at equal host speed, as the probe on other cores saw it (host_probe.py)
        adjusted = {}
        for key in PROBE_KEYS:
            probes = [(r[side].get("probe", {}).get(key), r[against].get("probe", {}).get(key)) for r in done]
            if all(o and h for o, h in probes):
                covariate = [math.log(o / h) for o, h in probes]
                adjusted[key] = {"covariate": covariate, **parity.adjusted_ratio(ratios, covariate).__dict__}
        if adjusted:
            summary["adjusted"] = adjusted
    return summary


def print_table(
    label: str, rounds: list[dict[str, Any]], summary: dict[str, Any], side: str = "ours", against: str = "harness"
) -> None:
    print(f"\n{label}: {side} / {against} by round (H: {against}, O: {side})")
    print(
        f"{'round':>5} {'first':<15} {'H':>8} {'O':>8} {'ratio':>6} | {'gap ms/req H':>12} {'O':>6} | "
        f"{'srv e2e ms H':>12} {'O':>7} | {'decode ms H':>11} {'O':>7} | {'win CPU s H':>11} {'O':>5} | "
        f"{'host cores H':>12} {'O':>5}"
    )
    for r in rounds:
        h, o = r.get(against, {}), r.get(side, {})
        if not (h.get("ok") and o.get("ok")):
            print(f"{r['round']:>5} {r['first']:<15} failed")
            continue
        print(
            f"{r['round']:>5} {r['first']:<15} {h['tps']:8.2f} {o['tps']:8.2f} {o['tps'] / h['tps']:6.3f} | "
            f"{h['gap_per_request_ms']:12.2f} {o['gap_per_request_ms']:6.2f} | "
            f"{per_measured(h, 'e2e_s'):12.1f} {per_measured(o, 'e2e_s'):7.1f} | "
            f"{per_measured(h, 'decode_s'):11.1f} {per_measured(o, 'decode_s'):7.1f} | "
            f"{h['client_window_cpu_s']:11.2f} {o['client_window_cpu_s']:5.2f} | "
            f"{h['host_busy_cores']:12.2f} {o['host_busy_cores']:5.2f}"
        )
    if "ratio" in summary:
        ratio = parity.RatioSummary(**summary["ratio"])
        print(f"geometric mean {side} / {against}: {ratio.describe()}")
        print(
            f"the server's e2e time per request, {side} / {against}: "
            f"{parity.RatioSummary(**summary['server_e2e_s_ratio']).describe()}"
        )
        if "equal_server_time_ratio" in summary:
            print(
                f"{side} / {against} with the server's own time held equal (what the clients and the API path "
                f"add): {parity.RatioSummary(**summary['equal_server_time_ratio']).describe()}"
            )
        print(
            f"same output tokens on both sides: {summary['same_tokens']}; prompt token offsets "
            f"({side} - {against}, per prompt): {summary['prompt_token_offsets']}"
        )
        for key, fit in summary.get("adjusted", {}).items():
            shown = {k: v for k, v in fit.items() if k != "covariate"}
            steps = ", ".join(f"{math.exp(c):.3f}" for c in fit["covariate"])
            print(
                f"at equal host speed by the probe's {key} (its {side} / {against} by round: {steps}): "
                f"{parity.AdjustedRatio(**shown).describe()}"
            )


def print_speed_map(label: str, rounds: list[dict[str, Any]], probe_log: str | None = None) -> None:
    """Each run's requests, in order, as the server's speed at the time (``parity.relative_speed_by_request``).

    One character a request: ``.`` under 0.9 of that prompt's median time per token over all
    runs, ``-`` up to 1.1, ``+`` up to 1.3, ``#`` above; runs in the order they ran.
    """
    runs = [
        (r["round"], side, r[side])
        for r in rounds
        for side in r.get("order", ("harness", "ours"))
        if r.get(side, {}).get("ok")
    ]
    if len(runs) < 2:
        return
    per_token = [[lat / max(n, 1) for lat, n in zip(row["latencies_s"], row["output_lens"])] for _, _, row in runs]
    try:
        relative = parity.relative_speed_by_request(per_token)
    except ValueError:
        return
    print(
        f"\n{label}: time per token of each request over that prompt's median over all runs "
        f"('.' < 0.9 <= '-' < 1.1 <= '+' < 1.3 <= '#'), runs in the order they ran"
    )
    for (index, side, row), values in zip(runs, relative):
        strip = "".join("." if v < 0.9 else "-" if v < 1.1 else "+" if v < 1.3 else "#" for v in values)
        slow = sum(v >= 1.1 for v in values) / len(values)
        print(f"{index:>3} {side:<16} {row['tps']:8.2f} slow {slow:4.0%} {strip}")
    if probe_log:
        print_probe_correlation(label, [row for _, _, row in runs], relative, parity.load_probe(probe_log))


def print_probe_correlation(
    label: str, rows: list[dict[str, Any]], relative: list[list[float]], lines: list[dict[str, float]]
) -> None:
    """Does the probe on other cores see the server's slow stretches? Request by request, over all runs.

    The correlation of the log of each request's relative time per token (the speed map's
    figure) with the log of the probe's time over that request's span (+- 0.5 s).
    """
    for key in PROBE_KEYS:
        pairs = []
        for row, values in zip(rows, relative):
            for begin, latency, value in zip(row.get("request_starts_unix") or [], row["latencies_s"], values):
                seen = parity.probe_mean(lines, key, begin - 0.5, begin + latency + 0.5)
                if seen:
                    pairs.append((math.log(value), math.log(seen)))
        if len(pairs) >= 3 and len({p[1] for p in pairs}) > 1:
            r = statistics.correlation([p[0] for p in pairs], [p[1] for p in pairs])
            print(
                f"{label}: the server's time per token against the probe's {key}, request by request: "
                f"correlation {r:+.3f} over {len(pairs)} requests"
            )


def summarize(entry: dict[str, Any], rounds: list[dict[str, Any]], sides: tuple[str, ...]) -> None:
    """``summary``: ours / harness; ``pairs``: every ours side against the harness and against ``ours``."""
    entry["summary"] = size_summary(rounds)
    pairs = {f"{side} / harness": size_summary(rounds, side) for side in sides[1:]}
    pairs |= {f"{side} / ours": size_summary(rounds, side, "ours") for side in sides[2:]}
    entry["pairs"] = pairs


def demo_prompt_pairs(source: str | None, count: int) -> list[tuple[str, str]]:
    demo = demo_paths()
    if source:
        return [(p.id, p.text) for p in load_prompts(source)][:count]
    tuning = [(p.id, p.text) for p in load_prompts(demo.prompts_tuning)]
    if count <= len(tuning):
        return tuning[:count]
    heldout = [(p.id, p.text) for p in load_prompts(demo.prompts_heldout)]
    return parity.extend_prompts(tuning + heldout, count)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--client-script", help="the harness client's bench_serving.py (from the sglang 0.5.2 wheel)")
    parser.add_argument("--client-python", help="the interpreter that runs the client (default: this one)")
    parser.add_argument("--manifest", help="default: the bundled CPU demo")
    parser.add_argument("--base-url", help="measure this running server instead of starting one")
    parser.add_argument("--model", help="its served model name (with --base-url)")
    parser.add_argument("--server-pid", type=int, help="its process id, for its CPU time (with --base-url)")
    parser.add_argument("--prompts", help="a prompt file (default: the demo's, see above)")
    parser.add_argument("--tokenizer", help="model folder or hub id (default: the manifest's MODEL_ID)")
    parser.add_argument("--sizes", default="48x128", help="PROMPTSxTOKENS[,...], each measured in turn (48x128)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of one run per client, per size (6)")
    parser.add_argument("--budget-s", type=float, help="start no round that would end after this many seconds")
    parser.add_argument("--work-dir", help="keep each run's output here (default: a temporary folder)")
    parser.add_argument(
        "--ours-connection",
        default=TpsSettings.connection,
        help="measure_tps's connection protocol, or several, comma-separated, each run in "
        f"every round ({', '.join(CONNECTIONS)}; default: its own default, "
        f"{TpsSettings.connection})",
    )
    parser.add_argument(
        "--ours-idle-s",
        type=float,
        help="add a side ours:idle, which waits this many seconds before its warm-up (the "
        "server idle, as while the harness's client starts; about 8.5 on the H200)",
    )
    parser.add_argument(
        "--probe-log",
        help="host_probe.py's output while the runs ran: each run's record gets "
        "the probe's figures, and the summary the ratio at equal host speed",
    )
    parser.add_argument("--out", "--json", dest="out", help="write every record and the summary here (JSON)")
    args = parser.parse_args()
    if args.client_script:
        args.client_script = os.path.abspath(args.client_script)
        if not Path(args.client_script).is_file():
            parser.error(f"--client-script {args.client_script}: no such file")
    elif not args.client_python:
        parser.error("give --client-script (bench_serving.py) or --client-python (a venv with sglang)")
    if args.client_python and os.sep in args.client_python:  # absolute, not resolved: a venv's python is a link
        args.client_python = os.path.abspath(args.client_python)
    if args.base_url and not args.model:
        parser.error("--base-url needs --model")
    try:
        sides = ("harness", *ours_sides(args.ours_connection, args.ours_idle_s))
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    began = time.monotonic()
    manifest = Manifest.load(args.manifest or demo_paths().manifest)
    tokenizer = args.tokenizer or manifest.env.get("MODEL_ID") or manifest.model_id
    if (Path(manifest.folder) / tokenizer).is_dir():  # a folder beside the manifest
        tokenizer = str(Path(manifest.folder) / tokenizer)
    report: dict[str, Any] = {
        "began": time.strftime("%Y-%m-%d %H:%M:%S"),
        "manifest": manifest.name,
        "host_cpus": os.cpu_count(),
        "ours_connection": args.ours_connection,
        "ours_idle_s": args.ours_idle_s,
        "sizes": {},
    }

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))

    with contextlib.ExitStack() as stack:
        workdir = (
            Path(args.work_dir)
            if args.work_dir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-parity-")))
        )
        workdir.mkdir(parents=True, exist_ok=True)
        if args.base_url:
            base_url, model, server_pid = args.base_url.rstrip("/"), args.model, args.server_pid
            report["server"] = {"base_url": base_url, "started_here": False}
        else:
            server = stack.enter_context(ServerProcess(manifest, log_path=workdir / "server.log", ready_timeout_s=900))
            base_url, model, server_pid = server.base_url, server.served_model_name, server.pid
            report["server"] = {"base_url": base_url, "started_here": True, "ready_s": server.ready_seconds}
            print(f"server ready in {server.ready_seconds:.0f} s at {base_url}", flush=True)
        for size in sizes:
            label = f"{size[0]}x{size[1]}"
            dataset = workdir / f"prompts-{label}.json"
            dataset.write_text(json.dumps(parity.sharegpt_records(demo_prompt_pairs(args.prompts, size[0]))))
            expected = [p.id for p in select_prompts(load_prompts(dataset), TpsSettings(num_prompts=size[0]))]
            bench = Bench(args, base_url, model, server_pid, tokenizer, dataset, size, workdir)
            rounds: list[dict[str, Any]] = []
            entry = report["sizes"][label] = {"rounds": rounds, "expected_order": expected}
            print(f"{label}: {size[0]} prompts x {size[1]} tokens, {args.rounds} rounds", flush=True)
            if args.probe_log and Path(args.probe_log).exists():
                # known before any round: how busy the host is (a quiet one keeps the server at one speed)
                host = parity.host_state(parity.load_probe(args.probe_log))
                if host:
                    entry["host_before"] = dataclasses.asdict(host)
                    print(f"  the host before the rounds: {host.describe()}", flush=True)
            last_round_s = 0.0
            for index in range(args.rounds):
                elapsed = time.monotonic() - began
                if args.budget_s is not None and elapsed + last_round_s > args.budget_s:
                    print(
                        f"  time budget: {elapsed:.0f} s spent, a round takes {last_round_s:.0f} s; "
                        f"stopping after {index} rounds",
                        flush=True,
                    )
                    entry["stopped_by_budget"] = True
                    break
                round_began = time.monotonic()
                order = parity.round_order(index, sides)
                record: dict[str, Any] = {"round": index, "first": order[0], "order": list(order)}
                for side in order:
                    record[side] = bench.run(side, f"{label}-r{index}")
                    print(describe_run(record[side]), flush=True)
                for side in sides[1:]:
                    record[side]["same_order"] = record[side].get("prompt_ids") == expected
                rounds.append(record)
                last_round_s = time.monotonic() - round_began
                summarize(entry, rounds, sides)
                save()
                for side in sides[1:]:
                    if record[side].get("ok") and record["harness"].get("ok"):
                        print(
                            f"  round {index}: {side} / harness "
                            f"{record[side]['tps'] / record['harness']['tps']:.3f} ({last_round_s:.0f} s)",
                            flush=True,
                        )
            summarize(entry, rounds, sides)
            save()
    report["seconds"] = time.monotonic() - began
    save()
    for label, entry in report["sizes"].items():
        for pair, summary in entry["pairs"].items():
            side, against = pair.split(" / ")
            print_table(label, entry["rounds"], summary, side, against)
        print_speed_map(label, entry["rounds"], args.probe_log)
        windows = [w for w in (timed_window(r[side]) for r in entry["rounds"] for side in sides) if w]
        if args.probe_log and windows:
            host = parity.host_state(
                parity.load_probe(args.probe_log), start=min(w[0] for w in windows), end=max(w[1] for w in windows)
            )
            if host:
                entry["host_during"] = dataclasses.asdict(host)
                print(f"{label}: the host during the rounds: {host.describe()}")
        for pair, summary in entry["pairs"].items():
            sd = summary.get("ratio", {}).get("log_sd")
            if sd:
                print(
                    f"{label}, {pair}: at this spread (SD of the log ratio {sd:.4f}) an interval within "
                    f"0.98-1.02 needs about {parity.pairs_for_interval(sd, 0.02)} pairs"
                )
        orders = [r[s].get("same_order") for r in entry["rounds"] for s in sides[1:] if r[s].get("ok")]
        print(f"ours sent the prompts in the harness's order: {all(orders) if orders else None}")
    save()  # with the host's state during the rounds
    failed = [r for e in report["sizes"].values() for r in e["rounds"] if not all(r[s].get("ok") for s in sides)]
    if failed:
        raise SystemExit(f"{len(failed)} rounds had a failed run")


if __name__ == "__main__":
    main()
