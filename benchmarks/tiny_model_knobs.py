#!/usr/bin/env python
"""Measure the three knobs on the bundled tiny Gemma 4 model with real vLLM servers.

Prints, each from its own server start (eager mode, float32, max-model-len 1024):

* PPL of the PPL reference records by sliding window (no speculation);
* mean acceptance length and single-stream TPS by speculative-token count K
  (K=0 is serving without speculation), at the drafter's CENTROID_TOP_K;
* mean acceptance length and TPS by CENTROID_TOP_K at a fixed K.

TPS follows the challenge's definition on a small scale: chat completions,
greedy, ``ignore_eos`` with a fixed output length, one request at a time,
one warm-up request first, TPS = output tokens / wall time of the timed
requests. Acceptance is read from the server's /metrics counters (difference
of two scrapes around the timed requests): 1 + accepted / drafts.

    python benchmarks/tiny_model_knobs.py                     # everything (~20 min)
    python benchmarks/tiny_model_knobs.py --only ppl --windows 16,32
    python benchmarks/tiny_model_knobs.py --only k --ks 0,2,3,4 --prompts 4
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

logger = logging.getLogger("tiny_model_knobs")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "sweeper" / "demo" / "data"
SERVED_NAME = "tiny-gemma4"
METRIC_RE = re.compile(r"^(vllm:spec_decode_[a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def drafter_copy(drafter: Path, top_k: int, workdir: Path) -> Path:
    """A folder like ``drafter`` whose config has ``centroid_intermediate_top_k=top_k``."""
    config = json.loads((drafter / "config.json").read_text())
    if config.get("centroid_intermediate_top_k") == top_k:
        return drafter
    copy = workdir / f"drafter-ctk{top_k}"
    copy.mkdir(exist_ok=True)
    for entry in drafter.iterdir():
        link = copy / entry.name
        if entry.name != "config.json" and not link.exists():
            link.symlink_to(entry.resolve())
    config["centroid_intermediate_top_k"] = top_k
    (copy / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return copy


@contextmanager
def vllm_server(
    model: Path,
    *,
    window: int | None = None,
    speculative: dict[str, Any] | None = None,
    log_path: Path,
    startup_timeout: float = 300.0,
) -> Iterator[str]:
    """Start a vLLM OpenAI server in its own process group; yield its base URL."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
        "--override-generation-config",
        json.dumps({"temperature": 0.0}),
    ]
    if window is not None:
        argv += ["--hf-overrides", json.dumps({"sliding_window": window})]
    if speculative is not None:
        argv += ["--speculative-config", json.dumps(speculative)]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            started = time.monotonic()
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"vLLM exited with {process.returncode}; see {log_path}")
                if time.monotonic() - started > startup_timeout:
                    raise TimeoutError(f"vLLM not ready after {startup_timeout:.0f} s; see {log_path}")
                try:
                    if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
            logger.info("server ready in %.0f s (%s)", time.monotonic() - started, log_path.name)
            yield url
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def spec_counters(url: str) -> dict[str, float]:
    """The spec-decode counters of /metrics, keyed by name (and position label)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    counters: dict[str, float] = {}
    for line in text.splitlines():
        match = METRIC_RE.match(line.strip())
        if not match:
            continue
        name, labels, value = match.groups()
        position = re.search(r'position="(\d+)"', labels or "")
        key = f"{name}[{position.group(1)}]" if position else name
        counters[key] = counters.get(key, 0.0) + float(value)
    return counters


def acceptance(before: dict[str, float], after: dict[str, float]) -> tuple[float, list[float]]:
    """Mean acceptance length and per-position acceptance rates between two scrapes."""

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    drafts = delta("vllm:spec_decode_num_drafts_total")
    if drafts <= 0:
        return float("nan"), []
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    prefix = "vllm:spec_decode_num_accepted_tokens_per_pos_total["
    positions = sorted(int(k[len(prefix) : -1]) for k in after if k.startswith(prefix))
    per_position = [delta(f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p}]") / drafts for p in positions]
    return 1.0 + accepted / drafts, per_position


def chat(client: httpx.Client, url: str, text: str, max_tokens: int) -> int:
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    response = client.post(url + "/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return int(response.json()["usage"]["completion_tokens"])


def measure_decoding(url: str, prompts: Sequence[str], warmup: str, max_tokens: int, rounds: int) -> dict[str, Any]:
    """TPS over ``prompts`` in each of ``rounds`` rounds (after one warm-up request).

    Other processes on a shared machine only ever slow a round down, so the
    best round is the least disturbed figure; the median is reported too.
    Acceptance is counted over all rounds.
    """
    with httpx.Client() as client:
        chat(client, url, warmup, max_tokens)
        before = spec_counters(url)
        per_round = []
        for _ in range(rounds):
            started = time.perf_counter()
            tokens = sum(chat(client, url, text, max_tokens) for text in prompts)
            per_round.append(tokens / (time.perf_counter() - started))
        after = spec_counters(url)
    mean_length, per_position = acceptance(before, after)
    return {
        "tps": max(per_round),
        "tps_median": statistics.median(per_round),
        "tps_rounds": per_round,
        "acceptance_length": mean_length,
        "per_position": per_position,
    }


def measure_ppl(url: str, records: Sequence[dict[str, Any]]) -> float:
    """Token-weighted PPL of the records' target tokens, as the challenge computes it."""
    total_nll, total_tokens = 0.0, 0
    with httpx.Client() as client:
        for record in records:
            context, target = record["context_token_ids"], record["target_token_ids"]
            body = {
                "model": SERVED_NAME,
                "prompt": context + target,
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 1,
                "add_special_tokens": False,
            }
            response = client.post(url + "/v1/completions", json=body, timeout=300)
            response.raise_for_status()
            entries = response.json()["choices"][0]["prompt_logprobs"]
            for offset, token in enumerate(target):
                entry = entries[len(context) + offset]
                total_nll -= float(entry[str(token)]["logprob"])
                total_tokens += 1
    return math.exp(total_nll / total_tokens)


def load_prompts(path: Path, count: int) -> list[str]:
    rows = json.loads(path.read_text())
    return [row["conversations"][0]["value"] for row in rows[:count]]


def load_records(path: Path, count: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:count]


def integers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", type=Path, default=DATA / "model")
    parser.add_argument("--drafter", type=Path, default=DATA / "drafter")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the prompt and PPL files")
    parser.add_argument(
        "--only", choices=["ppl", "k", "ctk"], action="append", help="sections to run (repeatable; default all)"
    )
    parser.add_argument("--windows", type=integers, default=[16, 24, 32, 48])
    parser.add_argument("--ks", type=integers, default=[0, 1, 2, 3, 4, 5, 6, 8])
    parser.add_argument("--ctks", type=integers, default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--ctk-k", type=int, default=3, help="K used for the CENTROID_TOP_K section")
    parser.add_argument("--prompts", type=int, default=3, help="timed prompts per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per server (best and median reported)")
    parser.add_argument("--max-tokens", type=int, default=256, help="output tokens per request")
    parser.add_argument("--ppl-records", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    sections = args.only or ["ppl", "k", "ctk"]
    *prompts, warmup = load_prompts(args.data / "prompts_tuning.json", args.prompts + 1)
    records = load_records(args.data / "ppl_tuning.jsonl", args.ppl_records)
    results: dict[str, Any] = {"ppl_by_window": {}, "by_k": {}, "by_ctk": {}}
    drafter_config = json.loads((args.drafter / "config.json").read_text())
    default_ctk = int(drafter_config.get("centroid_intermediate_top_k", 0))

    with tempfile.TemporaryDirectory(prefix="tiny-knobs-") as tmp:
        work = Path(tmp)
        if "ppl" in sections:
            for window in args.windows:
                with vllm_server(args.model, window=window, log_path=work / f"ppl-w{window}.log") as url:
                    ppl = measure_ppl(url, records)
                results["ppl_by_window"][window] = ppl
                print(f"window {window:4d}: PPL {ppl:8.3f}", flush=True)
        if "k" in sections:
            for k in args.ks:
                spec = None if k == 0 else {"method": "mtp", "model": str(args.drafter), "num_speculative_tokens": k}
                with vllm_server(args.model, speculative=spec, log_path=work / f"k{k}.log") as url:
                    row = measure_decoding(url, prompts, warmup, args.max_tokens, args.rounds)
                results["by_k"][k] = row
                print(
                    f"K {k:2d} (CTK {default_ctk}): TPS best {row['tps']:7.1f} median {row['tps_median']:7.1f}  acceptance length "
                    f"{row['acceptance_length']:.3f}  per position "
                    f"{[round(x, 3) for x in row['per_position']]}",
                    flush=True,
                )
        if "ctk" in sections:
            for top_k in args.ctks:
                drafter = drafter_copy(args.drafter, top_k, work)
                spec = {"method": "mtp", "model": str(drafter), "num_speculative_tokens": args.ctk_k}
                with vllm_server(args.model, speculative=spec, log_path=work / f"ctk{top_k}.log") as url:
                    row = measure_decoding(url, prompts, warmup, args.max_tokens, args.rounds)
                results["by_ctk"][top_k] = row
                print(
                    f"CTK {top_k:3d} (K {args.ctk_k}): TPS best {row['tps']:7.1f} median {row['tps_median']:7.1f}  acceptance length "
                    f"{row['acceptance_length']:.3f}  per position "
                    f"{[round(x, 3) for x in row['per_position']]}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
