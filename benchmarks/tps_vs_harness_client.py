"""Our TPS against the challenge harness's own client, whole runs, alternating on one server.

Each round runs the harness's client (sglang 0.5.2's ``bench_serving.py``,
as a script, with the harness's flags) and ``evaluators.measure_tps`` (with
its defaults, through this script's ``ours-run`` mode), each in a process
of its own as the harness runs its client: the harness first in even
rounds, ours first in odd ones. With ``--ours-connection harness,keep-alive``
ours runs once per protocol in every round (sides ``ours`` and
``ours:keep-alive``), and the order turns one place a round. For every run
it records the TPS, the client-side time between requests (wall clock less
the sum of the request latencies; ours also per gap), the server's
``/metrics`` counters before and after (requests, end-to-end, queue,
prefill, decode and inter-token time sums, tokens, acceptance; the clients'
4 warm-up requests are inside), the client process's CPU time, the server
process tree's CPU time and the host's busy CPU. It prints a table per
size, the geometric mean of ours / harness with a 95 % interval (t on the
log ratios), the same at equal server time (each round's TPS ratio times
the server's own end-to-end time ratio: what the clients and the API path
add), and a map of the server's speed request by request; it writes
everything to ``--out`` (JSON, rewritten after every run).

The client's file, without installing sglang (it imports nothing of
sglang; it needs aiohttp, numpy, requests, tqdm and transformers)::

    wheel=$(mktemp -d)
    python -m pip download --no-deps sglang==0.5.2 -d "$wheel"
    unzip -o -j "$wheel"/sglang-0.5.2-py3-none-any.whl sglang/bench_serving.py -d .harness-client
    echo /.harness-client/ >> .git/info/exclude   # another project's code: never committed

then::

    python -m benchmarks.tps_vs_harness_client --client-script .harness-client/bench_serving.py \\
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
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import parity
from evaluators import TpsSettings, load_prompts, measure_tps
from evaluators.spec_metrics import parse_metrics
from evaluators.tps import CONNECTIONS, select_prompts
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess

REPO = Path(__file__).resolve().parents[1]  # the folder that holds the benchmarks package
OURS_RUN = "ours-run"  # the mode in which this script is one measure_tps run (a process of its own)
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


def run_child(command: list[str], log: Path, timeout_s: float, env: dict[str, str]) -> ChildRun:
    """Run ``command`` with its output to ``log``, reading its CPU time while it runs."""
    began = time.perf_counter()
    samples: list[tuple[float, float]] = []
    with log.open("w") as sink:
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=log.parent)
        deadline = time.monotonic() + timeout_s
        next_sample = 0.0
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
        self.sides = ours_sides(args.ours_connection)
        self.tokenizer, self.dataset, self.workdir = tokenizer, dataset, workdir
        self.num_prompts, self.output_len = size
        self.timeout_s = 120 + self.num_prompts * (30 + 0.1 * self.output_len)
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        # our side runs as ``python -m benchmarks.tps_vs_harness_client`` in the work folder: the
        # repository's packages are found through PYTHONPATH
        self.ours_env = {
            **self.env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }

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
            "-m",
            "benchmarks.tps_vs_harness_client",
            OURS_RUN,
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
        child = run_child(command, log, self.timeout_s, self.env if side == "harness" else self.ours_env)
        code, wall, cpu = child.exit_code, child.wall_s, child.cpu_s
        host_after = parity.host_cpu_jiffies()
        if self.server_pid and server_cpu is not None:
            server_cpu = parity.process_tree_cpu_s(self.server_pid) - server_cpu
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
            }
        row |= parity.gap_summary(row["duration_s"], row["latencies_s"])
        # both sides alike: the CPU of the client's last `duration` seconds (its timed window and what it
        # does after it: printing and writing its result)
        row["client_window_cpu_s"] = parity.cpu_in_last(child.cpu_samples, wall, row["duration_s"], cpu)
        return row


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
        f"accepted per draft; host busy {row['host_busy_cores']:.2f} cores"
    )


def per_measured(row: dict[str, Any], key: str) -> float:
    """A server time sum per request (ms), the warm-up's requests included in the count."""
    return parity.ms_per_request(row["server"], key)


@dataclasses.dataclass(frozen=True)
class OursSide:
    """How one of our sides measures: ``measure_tps``'s connection protocol."""

    connection: str


def ours_sides(connections: str) -> dict[str, OursSide]:
    """``harness,keep-alive`` -> sides ``ours`` (harness) and ``ours:keep-alive``."""
    wanted = [c.strip() for c in connections.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CONNECTIONS]
    if not wanted or unknown or len(set(wanted)) < len(wanted):
        raise argparse.ArgumentTypeError(
            f"--ours-connection: one or more of {', '.join(CONNECTIONS)}, each once, not {connections!r}"
        )
    return {("ours" if i == 0 else f"ours:{c}"): OursSide(c) for i, c in enumerate(wanted)}


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


def print_speed_map(label: str, rounds: list[dict[str, Any]]) -> None:
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


def ours_run(argv: list[str]) -> None:
    """One ``measure_tps`` run against a running server: this script's ``ours-run`` mode, a process of its own.

    It measures with ``TpsSettings``'s defaults but for the size and the connection,
    and writes the result, each request's end time (``time.perf_counter`` of this
    process, from the progress callback) and this process's CPU time to ``--out``.
    """
    parser = argparse.ArgumentParser(prog=f"tps_vs_harness_client.py {OURS_RUN}", description=ours_run.__doc__)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--prompts", required=True, help="a ShareGPT JSON file")
    parser.add_argument("--num-prompts", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=512)
    parser.add_argument("--connection", choices=CONNECTIONS, default=TpsSettings.connection)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    prompts = load_prompts(args.prompts)
    settings = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, connection=args.connection)
    ends: list[float] = []
    marks: dict[str, float] = {}

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "tps":
            ends.append(time.perf_counter())
        elif phase == "tps warm-up":
            marks["warmup_cpu"] = sum(os.times()[:2])

    result = measure_tps(args.base_url, args.model, prompts, settings, progress=progress)
    finished = time.perf_counter()
    times = os.times()
    record = {
        "result": result.to_dict(),
        "request_ends_s": [t - started for t in ends],
        "process_s": finished - started,
        "self_cpu_s": times.user + times.system,
        # from the warm-up's end (the 1 s pause, then the timed requests) to the end
        "window_cpu_s": times.user + times.system - marks.get("warmup_cpu", 0.0),
    }
    Path(args.out).write_text(json.dumps(record))
    if not result.ok:
        print(f"measure_tps failed: {result.first_error}", file=sys.stderr)
        raise SystemExit(1)
    print(f"ours {result.tps:.2f} tok/s: {result.output_tokens} tokens in {result.duration_s:.2f} s")


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
        sides = ("harness", *ours_sides(args.ours_connection))
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
        print_speed_map(label, entry["rounds"])
        for pair, summary in entry["pairs"].items():
            sd = summary.get("ratio", {}).get("log_sd")
            if sd:
                print(
                    f"{label}, {pair}: at this spread (SD of the log ratio {sd:.4f}) an interval within "
                    f"0.98-1.02 needs about {parity.pairs_for_interval(sd, 0.02)} pairs"
                )
        orders = [r[s].get("same_order") for r in entry["rounds"] for s in sides[1:] if r[s].get("ok")]
        print(f"ours sent the prompts in the harness's order: {all(orders) if orders else None}")
    failed = [r for e in report["sizes"].values() for r in e["rounds"] if not all(r[s].get("ok") for s in sides)]
    if failed:
        raise SystemExit(f"{len(failed)} rounds had a failed run")


if __name__ == "__main__":
    if sys.argv[1:2] == [OURS_RUN]:
        ours_run(sys.argv[2:])
    else:
        main()
