"""Our TPS against the challenge harness's own client, on one server, interleaved.

The harness measures with ``sglang.bench_serving`` 0.5.2. This script runs
it (from a separate venv: it pins its own transformers) and
``evaluators.measure_tps`` against one ``sweeper serve`` of a manifest,
alternating A B B A ..., and prints each figure, the ratio ours / theirs,
the CPU seconds our client used, and whether both sides sent the same
requests (count, prompts, output tokens). ``--given`` adds a third side:
``measure_tps`` with the old protocol (prompts in file order, sequential
full-length warm-up), for comparison.

Make the client's venv once (no network needed beyond the package index)::

    python3 -m venv .harness-venv
    .harness-venv/bin/pip install --no-deps sglang==0.5.2
    .harness-venv/bin/pip install transformers==5.9.0 numpy aiohttp tqdm requests \\
        IPython setproctitle pybase64 pydantic

then::

    python benchmarks/tps_vs_harness_client.py --client-python .harness-venv/bin/python \\
        [--manifest M] [--num-prompts 48] [--output-len 128] [--rounds 3] [--given] \\
        [--budget-s 500] [--json OUT.json]

The venv is kept out of git by a ``.gitignore`` holding ``*`` inside it
(``echo '*' > .harness-venv/.gitignore``). The harness client is run with
``HF_HUB_OFFLINE=1``: it looks the served model name up on the hub before
it starts, which without a network costs about 50 s per run (outside its
timer).

The harness's flags: ``--backend vllm-chat --disable-stream --dataset-name
sharegpt --max-concurrency 1 --request-rate inf --warmup-requests 4 --seed 1
--extra-request-body '{"ignore_eos": true}'`` (plus the output length). Its
ShareGPT loader keeps conversations of two turns or more, so the prompts
are written out with an answer turn.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators import TpsSettings, load_prompts, measure_tps
from evaluators.spec_metrics import parse_metrics
from evaluators.tps import select_prompts
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess

# the server's own counters, read before and after each run: where a gap between
# the clients sits (the server's work per request, or the way to and from it)
SERVER_COUNTERS = {
    "requests": "vllm:e2e_request_latency_seconds_count",
    "e2e_s": "vllm:e2e_request_latency_seconds_sum",
    "queue_s": "vllm:request_queue_time_seconds_sum",
    "prefill_s": "vllm:request_prefill_time_seconds_sum",
    "decode_s": "vllm:request_decode_time_seconds_sum",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}


def server_counters(base_url: str) -> dict[str, float]:
    import httpx

    samples = parse_metrics(httpx.get(f"{base_url}/metrics", timeout=30).text)
    return {key: sum(v for _, v in samples.get(name, [])) for key, name in SERVER_COUNTERS.items()}


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in before}


THROUGHPUT = re.compile(r"Output token throughput \(tok/s\):\s*([0-9.]+)")


def harness_tps(client_python: str, server: ServerProcess, dataset: Path, tokenizer: str,
                num_prompts: int, output_len: int, workdir: Path) -> tuple[float, dict]:
    """The harness client's TPS and its per-request record (``--output-details``)."""
    command = [
        client_python, "-m", "sglang.bench_serving",
        "--backend", "vllm-chat", "--base-url", server.base_url,
        "--model", server.served_model_name, "--tokenizer", tokenizer,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
        "--num-prompts", str(num_prompts), "--sharegpt-output-len", str(output_len),
        "--disable-stream", "--max-concurrency", "1", "--request-rate", "inf",
        "--warmup-requests", "4", "--seed", "1",
        "--extra-request-body", json.dumps({"ignore_eos": True}),
        "--output-file", str(workdir / "harness.jsonl"), "--output-details", "--disable-tqdm",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, check=False, capture_output=True, text=True, cwd=workdir, timeout=3600, env=env)
    match = THROUGHPUT.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"the harness client failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    lines = (workdir / "harness.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    return float(match.group(1)), record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client-python", required=True, help="python of the venv with sglang 0.5.2")
    parser.add_argument("--manifest", help="default: the bundled demo")
    parser.add_argument("--prompts", help="default: the demo's tuning prompts")
    parser.add_argument("--tokenizer", help="model folder or hub id (default: the manifest's MODEL_ID)")
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="A B B A blocks")
    parser.add_argument("--given", action="store_true",
                        help="also measure with the old protocol (file order, sequential warm-up)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no new block after this many seconds (a lock's time slot)")
    parser.add_argument("--json", help="write every figure and per-request record here")
    args = parser.parse_args()
    # absolute but not resolved: the venv's python is a link, and the client runs in a temporary folder
    if os.sep in args.client_python:
        args.client_python = os.path.abspath(args.client_python)
    began = time.monotonic()
    demo = demo_paths()
    manifest = Manifest.load(args.manifest or demo.manifest)
    prompts = load_prompts(args.prompts or demo.prompts_tuning).head(args.num_prompts)
    tokenizer = args.tokenizer or manifest.env.get("MODEL_ID") or manifest.model_id
    if (Path(manifest.folder) / tokenizer).is_dir():  # a folder beside the manifest
        tokenizer = str(Path(manifest.folder) / tokenizer)
    settings = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=4)
    old = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=4,
                      order="given", warmup="sequential")
    sent_order = [p.id for p in select_prompts(prompts, settings)]
    ours_sides = ("ours", "given") if args.given else ("ours",)
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as folder:
        workdir = Path(folder)
        dataset = workdir / "prompts_sharegpt.json"
        dataset.write_text(json.dumps([
            {"id": p.id, "conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "ok"}]}
            for p in prompts
        ]))  # fmt: skip
        rows: list[dict] = []
        with ServerProcess(manifest, log_path=workdir / "server.log", ready_timeout_s=900) as server:
            print(f"server ready in {server.ready_seconds:.0f} s at {server.base_url}; "
                  f"{args.num_prompts} prompts x {args.output_len} tokens", flush=True)
            for block in range(args.rounds):
                if args.budget_s is not None and time.monotonic() - began > args.budget_s:
                    print(f"time budget spent after {block} blocks", flush=True)
                    break
                first = ("harness", *ours_sides)
                order = (*first, *reversed(first)) if block % 2 == 0 else (*reversed(first), *first)
                for side in order:
                    cpu = time.process_time()
                    counters = server_counters(server.base_url)
                    if side == "harness":
                        value, record = harness_tps(args.client_python, server, dataset, tokenizer,
                                                    args.num_prompts, args.output_len, workdir)
                        latencies, wall = list(record["ttfts"]), float(record["duration"])
                        outputs, inputs = list(record["output_lens"]), list(record["input_lens"])
                        ids = sent_order  # the harness's own order (checked: its sampler, seed 1)
                    else:
                        result = measure_tps(server.base_url, server.served_model_name, prompts,
                                             settings if side == "ours" else old)
                        value = result.tps
                        latencies, wall = [r.latency_s for r in result.requests], result.duration_s
                        outputs = [r.output_tokens for r in result.requests]
                        inputs = [r.prompt_tokens for r in result.requests]
                        ids = [r.prompt_id for r in result.requests]
                    cpu = time.process_time() - cpu
                    served = counter_delta(counters, server_counters(server.base_url))
                    rows.append({"side": side, "tps": value, "duration_s": wall, "client_cpu_s": cpu,
                                 "latencies_s": latencies, "output_lens": outputs, "input_lens": inputs,
                                 "prompt_ids": ids, "load": os.getloadavg()[0],
                                 "server": served})
                    print(f"  {side:<8} {value:8.2f} tok/s; {len(latencies)} requests, {sum(outputs)} tokens, "
                          f"{sum(latencies):7.2f} s of {wall:7.2f} s wall; median request "
                          f"{statistics.median(latencies) * 1000:6.1f} ms; client CPU {cpu:5.2f} s "
                          f"(ours only); load {os.getloadavg()[0]:.1f}", flush=True)
                    n = max(served["requests"], 1)
                    print(f"           server: {served['requests']:.0f} requests (warm-up included), "
                          f"e2e {served['e2e_s'] / n * 1000:6.1f} ms, decode {served['decode_s'] / n * 1000:6.1f} ms, "
                          f"prefill {served['prefill_s'] / n * 1000:5.1f} ms, queue {served['queue_s'] / n * 1000:5.1f} ms "
                          f"per request; {served['prompt_tokens']:.0f} prompt tokens "
                          f"({served['prefix_hits']:.0f} from cache), {served['generation_tokens']:.0f} generated, "
                          f"{served['accepted'] / max(served['drafts'], 1):.3f} accepted per draft", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    theirs = [r for r in rows if r["side"] == "harness"]
    for side in ours_sides:
        ours = [r for r in rows if r["side"] == side]
        pairs = [o["tps"] / t["tps"] for o, t in zip(ours, theirs)]
        if not pairs:
            continue
        same = all(len(o["output_lens"]) == len(t["output_lens"]) and sum(o["output_lens"]) == sum(t["output_lens"])
                   for o, t in zip(ours, theirs))  # fmt: skip
        print(f"{side} / harness, paired in run order: {', '.join(f'{r:.3f}' for r in pairs)}; "
              f"median {statistics.median(pairs):.3f}; same request count and tokens: {same}")
        print(f"  {side} median {statistics.median(r['tps'] for r in ours):.1f}, harness median "
              f"{statistics.median(r['tps'] for r in theirs):.1f} tok/s")
    order_ours = next((r["prompt_ids"] for r in rows if r["side"] == "ours"), None)
    if order_ours is not None:
        print(f"ours sends the prompts in the harness's order: {order_ours == sent_order}")


if __name__ == "__main__":
    main()
