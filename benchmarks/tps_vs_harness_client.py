"""Our TPS against the challenge harness's own client, on one server, interleaved.

The harness measures with ``sglang.bench_serving`` 0.5.2. This script runs
it (from a separate venv: it pins its own transformers) and
``evaluators.measure_tps`` against one ``sweeper serve`` of a manifest,
alternating A B B A ..., and prints each figure and the ratio ours / theirs.

Make the client's venv once (no network needed beyond the package index)::

    python3 -m venv .harness-venv
    .harness-venv/bin/pip install --no-deps sglang==0.5.2
    .harness-venv/bin/pip install transformers==5.9.0 numpy aiohttp tqdm requests \\
        IPython setproctitle pybase64 pydantic

then::

    python benchmarks/tps_vs_harness_client.py --client-python .harness-venv/bin/python \\
        [--manifest M] [--num-prompts 48] [--output-len 128] [--rounds 3]

The harness's flags: ``--backend vllm-chat --disable-stream --dataset-name
sharegpt --max-concurrency 1 --request-rate inf --warmup-requests 4 --seed 1
--extra-request-body '{"ignore_eos": true}'`` (plus the output length). Its
ShareGPT loader keeps conversations of two turns or more, so the prompts
are written out with an answer turn.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators import TpsSettings, load_prompts, measure_tps  # noqa: E402
from sweeper.demo import demo_paths  # noqa: E402
from sweeper.manifest import Manifest  # noqa: E402
from sweeper.serving import ServerProcess  # noqa: E402

THROUGHPUT = re.compile(r"Output token throughput \(tok/s\):\s*([0-9.]+)")


def harness_tps(client_python: str, server: ServerProcess, dataset: Path, tokenizer: str,
                num_prompts: int, output_len: int, workdir: Path) -> tuple[float, dict]:
    """The harness client's TPS and its per-request record (latencies by prompt length)."""
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
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=3600)
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
    parser.add_argument("--variant", choices=["plain", "harness-order"], default="plain",
                        help="harness-order: our client on the harness's shuffled prompt order")
    args = parser.parse_args()
    demo = demo_paths()
    manifest = Manifest.load(args.manifest or demo.manifest)
    prompts = load_prompts(args.prompts or demo.prompts_tuning).head(args.num_prompts)
    tokenizer = args.tokenizer or manifest.env.get("MODEL_ID") or manifest.model_id
    if (Path(manifest.folder) / tokenizer).is_dir():  # a folder beside the manifest
        tokenizer = str(Path(manifest.folder) / tokenizer)
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as folder:
        workdir = Path(folder)
        dataset = workdir / "prompts_sharegpt.json"
        dataset.write_text(json.dumps([
            {"id": p.id, "conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "ok"}]}
            for p in prompts
        ]))  # fmt: skip
        ours_prompts = list(prompts)
        if args.variant == "harness-order":
            random.Random(1).shuffle(ours_prompts)  # the harness shuffles with --seed 1
        settings = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=4)
        rows = []
        details = []
        with ServerProcess(manifest, log_path=workdir / "server.log", ready_timeout_s=900) as server:
            print(f"server ready in {server.ready_seconds:.0f} s at {server.base_url}; "
                  f"{args.num_prompts} prompts x {args.output_len} tokens", flush=True)
            for block in range(args.rounds):
                order = ("harness", "ours", "ours", "harness") if block % 2 == 0 else ("ours", "harness", "harness", "ours")
                for side in order:
                    if side == "harness":
                        value, record = harness_tps(args.client_python, server, dataset, tokenizer,
                                                    args.num_prompts, args.output_len, workdir)
                        latencies, wall = list(record["ttfts"]), float(record["duration"])
                    else:
                        result = measure_tps(server.base_url, server.served_model_name, ours_prompts, settings)
                        value = result.tps
                        latencies, wall = [r.latency_s for r in result.requests], result.duration_s
                    rows.append((side, value))
                    details.append((side, sorted(latencies), wall))
                    print(f"  {side:<8} {value:8.2f} tok/s; requests {sum(latencies):7.2f} s of "
                          f"{wall:7.2f} s wall; median request {statistics.median(latencies) * 1000:6.1f} ms",
                          flush=True)
    ours = [v for s, v in rows if s == "ours"]
    theirs = [v for s, v in rows if s == "harness"]
    pairs = [o / t for o, t in zip(ours, theirs)]
    print(f"ours / harness, paired in run order: {', '.join(f'{r:.3f}' for r in pairs)}")
    print(f"median ratio {statistics.median(pairs):.3f}; ours median {statistics.median(ours):.1f}, "
          f"harness median {statistics.median(theirs):.1f} tok/s")


if __name__ == "__main__":
    main()
