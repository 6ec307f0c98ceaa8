"""Our request against the harness client's request, prompt by prompt, on one server.

Whole benchmark runs on one server drift by 10-25 % within minutes on a
shared machine, more than the few percent this comparison looks for. Here the
two clients take turns on every prompt instead: for each prompt, one request
from ``evaluators.measure_tps``'s own sender (httpx, in this process, with
``measure_tps``'s connection protocol: by default a connection per request;
``--connection keep-alive``: one for the pass, as this benchmark did until
2026-12-02) and one from the harness client's own request
function (``sglang.bench_serving.async_request_openai_chat_completions``:
aiohttp, a new session per request, run in the client's venv as a child
process that answers one request per line), in alternating order (A B, B A,
...; with two protocols of ours, three sides, the order turned one place a
prompt). Both time the request the same way (from just before the request is
sent to the parsed answer); the ratio of the two latencies of one prompt,
taken seconds apart, hardly sees the drift.

It also reads the server's own figures (``/metrics``: end-to-end, decode and
prefill time per request) for each side, summed over its requests, so that a
gap can be placed in the server's work or on the way to and from it.

    python benchmarks/tps_client_per_request.py --client-python .harness-venv/bin/python \\
        [--manifest M] [--num-prompts 48] [--output-len 128] [--passes 2] [--json OUT.json]

Where sglang's own dependencies cannot be installed (an offline GPU machine
with vLLM's), ``--client-script bench_serving.py`` (``--bench-serving-file``;
unpacked from the sglang 0.5.2 wheel as ``tps_vs_harness_client.py``'s
docstring says) loads the module on its own, in a child process of this
interpreter (or ``--client-python``); it needs only what vLLM already
brings. ``--base-url URL --model NAME`` measures a running server instead
of starting one of ``--manifest``.

The client venv is made as ``tps_vs_harness_client.py``'s docstring says.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import parity  # noqa: E402
from tps_vs_harness_client import demo_prompt_pairs, ours_sides  # noqa: E402

from evaluators import TpsSettings, load_prompts  # noqa: E402
from evaluators._common import make_client  # noqa: E402
from evaluators.spec_metrics import parse_metrics  # noqa: E402
from evaluators.tps import _send, select_prompts  # noqa: E402
from sweeper.demo import demo_paths  # noqa: E402
from sweeper.manifest import Manifest  # noqa: E402
from sweeper.serving import ServerProcess  # noqa: E402

# run by the client venv's python: one harness request per line read, its figures written back
CHILD = textwrap.dedent(
    """
    import argparse, asyncio, importlib.util, json, os, sys
    path = os.environ.get("BENCH_SERVING_FILE")
    if path:  # the module's own file, without sglang's package (and its other dependencies)
        spec = importlib.util.spec_from_file_location("bench_serving", path)
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    else:
        import sglang.bench_serving as bench
    bench.set_global_args(argparse.Namespace(disable_stream=True))
    api_url, model = sys.argv[1], sys.argv[2]
    loop = asyncio.new_event_loop()
    print("ready", flush=True)
    for line in sys.stdin:
        asked = json.loads(line)
        request = bench.RequestFuncInput(
            prompt=asked["prompt"], api_url=api_url, prompt_len=0, output_len=asked["max_tokens"],
            model=model, lora_name=None, image_data=None, extra_request_body={"ignore_eos": True})
        out = loop.run_until_complete(bench.async_request_openai_chat_completions(request))
        print(json.dumps({"ok": out.success, "latency_s": out.latency, "output_tokens": out.output_len,
                          "error": out.error[:300]}), flush=True)
    """
)

SERVER_SUMS = {
    "e2e_s": "vllm:e2e_request_latency_seconds_sum",
    "decode_s": "vllm:request_decode_time_seconds_sum",
    "prefill_s": "vllm:request_prefill_time_seconds_sum",
    "queue_s": "vllm:request_queue_time_seconds_sum",
    "requests": "vllm:e2e_request_latency_seconds_count",
}


def client_command(python: str) -> str:
    """A path as given, made absolute (not resolved: a venv's python is a link); a bare name from PATH."""
    return os.path.abspath(python) if os.sep in python else (shutil.which(python) or python)


@dataclasses.dataclass(frozen=True)
class RunningServer:
    """A server started elsewhere (``--base-url``), with the fields used here."""

    base_url: str
    served_model_name: str
    ready_seconds: float = 0.0


def server_sums(client: httpx.Client) -> dict[str, float]:
    samples = parse_metrics(client.get("/metrics").text)
    return {key: sum(v for _, v in samples.get(name, [])) for key, name in SERVER_SUMS.items()}


def geometric_interval(ratios: list[float], *, resamples: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """Geometric mean of the ratios and a 95 % bootstrap interval."""
    logs = [math.log(r) for r in ratios]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(resamples))
    low, high = means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]
    return math.exp(statistics.fmean(logs)), math.exp(low), math.exp(high)


def prompt_pairs(rows: list[dict]) -> dict[tuple[int, str], dict[str, dict]]:
    """The rows (as ``--json`` writes them) by (pass, prompt): each side's request of that prompt."""
    pairs: dict[tuple[int, str], dict[str, dict]] = {}
    for r in rows:
        pairs.setdefault((r["pass"], r["prompt_id"]), {})[r["side"]] = r
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--client-python",
        default=sys.executable,
        help="python of the venv with sglang 0.5.2, or the one that runs --client-script (default: this one)",
    )
    parser.add_argument("--manifest", help="default: the bundled demo")
    parser.add_argument("--prompts", help="default: the demo's tuning prompts")
    parser.add_argument(
        "--num-prompts",
        type=int,
        default=48,
        help="over the demo's 48 tuning prompts: its held-out ones and reversed copies "
        "(those tps_vs_harness_client.py sends at that size)",
    )
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--passes", type=int, default=2, help="passes over the prompts (default 2)")
    parser.add_argument(
        "--connection",
        default=TpsSettings.connection,
        help="ours: harness (measure_tps's default: a connection per request, as the "
        "harness's client opens) or keep-alive (one connection for the pass; what this "
        "benchmark did before 2026-12-02), or both, comma-separated (harness,keep-alive: "
        "a request of each for every prompt, the order turned one place a prompt); "
        f"default {TpsSettings.connection}",
    )
    parser.add_argument("--json", help="write every request's figures here")
    parser.add_argument("--base-url", help="measure this running server instead of starting one")
    parser.add_argument("--model", help="its served model name (with --base-url)")
    parser.add_argument(
        "--bench-serving-file",
        "--client-script",
        dest="bench_serving_file",
        help="load the client's request function from this copy of sglang/bench_serving.py "
        "(it needs only aiohttp, numpy, requests, tqdm and transformers), not from sglang",
    )
    args = parser.parse_args()
    if args.base_url and not args.model:
        parser.error("--base-url needs --model")
    demo = demo_paths()
    manifest = Manifest.load(args.manifest or demo.manifest)
    try:
        # side -> protocol: {"ours": "harness", "ours:keep-alive": "keep-alive"} (no idle: requests take turns)
        connections = {side: how.connection for side, how in ours_sides(args.connection).items()}
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    sides = ("harness", *connections)
    settings = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=4)
    given = load_prompts(args.prompts or demo.prompts_tuning)
    if args.prompts or args.num_prompts <= len(given):
        prompts = select_prompts(given, settings)
    else:  # more than the demo's tuning prompts: the ones tps_vs_harness_client.py sends at that size
        with tempfile.TemporaryDirectory(prefix="per-request-prompts-") as folder:
            dataset = Path(folder) / "prompts.json"
            dataset.write_text(json.dumps(parity.sharegpt_records(demo_prompt_pairs(None, args.num_prompts))))
            prompts = select_prompts(load_prompts(dataset), settings)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="per-request-") as folder:
        serving = (
            contextlib.nullcontext(RunningServer(args.base_url.rstrip("/"), args.model))
            if args.base_url
            else ServerProcess(manifest, log_path=Path(folder) / "server.log", ready_timeout_s=900)
        )
        with serving as server:
            print(
                f"server ready in {server.ready_seconds:.0f} s; {len(prompts)} prompts x "
                f"{args.output_len} tokens, {args.passes} passes, the clients taking turns; ours with "
                f"{', '.join(f'{s}: {c}' for s, c in connections.items())}",
                flush=True,
            )
            child = subprocess.Popen(
                [
                    client_command(args.client_python),
                    "-c",
                    CHILD,
                    f"{server.base_url}/v1/chat/completions",
                    server.served_model_name,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={
                    **os.environ,
                    "HF_HUB_OFFLINE": "1",
                    **(
                        {"BENCH_SERVING_FILE": os.path.abspath(args.bench_serving_file)}
                        if args.bench_serving_file
                        else {}
                    ),
                },
            )
            try:
                if child.stdout.readline().strip() != "ready":
                    raise SystemExit("the harness client's child did not start")

                def harness(prompt_text: str, max_tokens: int) -> dict:
                    child.stdin.write(json.dumps({"prompt": prompt_text, "max_tokens": max_tokens}) + "\n")
                    child.stdin.flush()
                    return json.loads(child.stdout.readline())

                # ours: measure_tps's protocols (each a client of its own: a connection per request, or
                # one kept for the pass); the /metrics scrapes on a connection of their own
                with contextlib.ExitStack() as clients:
                    metrics = clients.enter_context(make_client(server.base_url))
                    ours = {
                        side: clients.enter_context(
                            make_client(
                                server.base_url, settings.request_timeout_s, keep_alive=protocol == "keep-alive"
                            )
                        )
                        for side, protocol in connections.items()
                    }
                    for index in range(4):  # warm every client's path up
                        for client in ours.values():
                            _send(client, server.served_model_name, prompts[0], index, settings, max_tokens=32)
                        harness(prompts[0].text, 32)
                    step = 0
                    for turn in range(args.passes):
                        for prompt in prompts:
                            order = parity.round_order(step, sides)
                            step += 1
                            for place, side in enumerate(order):
                                before = server_sums(metrics)
                                if side == "harness":
                                    figures = harness(prompt.text, args.output_len)
                                else:
                                    # the protocol is the client's (made above); _send only sends
                                    record = _send(ours[side], server.served_model_name, prompt, 0, settings)
                                    figures = {
                                        "ok": record.ok,
                                        "latency_s": record.latency_s,
                                        "output_tokens": record.output_tokens,
                                        "error": record.error,
                                    }
                                after = server_sums(metrics)
                                served = {key: after[key] - before[key] for key in before}
                                rows.append(
                                    {
                                        "pass": turn,
                                        "prompt_id": prompt.id,
                                        "side": side,
                                        "connection": connections.get(side, "harness"),
                                        "place": place,
                                        "first": place == 0,
                                        **figures,
                                        "server": served,
                                    }
                                )
                        print(f"  pass {turn + 1} done at load {os.getloadavg()[0]:.1f}", flush=True)
            finally:
                child.stdin.close()
                child.wait(timeout=30)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if not r["ok"] or r["output_tokens"] != args.output_len]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed or came back short; first: {bad[0]}")
    pairs = prompt_pairs(rows)
    counted = sum(1 for r in rows if round(r["server"]["requests"]) == 1)
    print(
        f"{len(pairs)} prompts with a request of each side ({', '.join(sides)}); the server had counted "
        f"the request by the time it answered in {counted} of {len(rows)}"
    )
    comparisons = [(side, "harness") for side in sides[1:]] + [(side, sides[1]) for side in sides[2:]]
    for side, against in comparisons:
        client_ratio = [p[side]["latency_s"] / p[against]["latency_s"] for p in pairs.values()]
        server_ratio = [p[side]["server"]["e2e_s"] / p[against]["server"]["e2e_s"] for p in pairs.values()]
        outside = [
            (p[side]["latency_s"] - p[side]["server"]["e2e_s"])
            - (p[against]["latency_s"] - p[against]["server"]["e2e_s"])
            for p in pairs.values()
        ]
        g, lo, hi = geometric_interval(client_ratio)
        print(
            f"latency {side} / {against}, as each client timed it: {g:.4f} (95 % interval {lo:.4f} to "
            f"{hi:.4f}); TPS {against}-equivalent ratio {1 / g:.4f}"
        )
        g, lo, hi = geometric_interval(server_ratio)
        print(f"  the server's own end-to-end time, {side} / {against}: {g:.4f} (95 % interval {lo:.4f} to {hi:.4f})")
        print(
            f"  time outside the server, {side} minus {against}: median "
            f"{statistics.median(outside) * 1000:.2f} ms per request"
        )
    first = [r["latency_s"] for r in rows if r["place"] == 0]
    last = [r["latency_s"] for r in rows if r["place"] == len(sides) - 1]
    print(
        f"first of a prompt's requests / last of them (order effect): "
        f"{statistics.median(first) / statistics.median(last):.4f}"
    )
    for side in sides:
        mine = [r for r in rows if r["side"] == side]
        tokens = sum(r["output_tokens"] for r in mine)
        print(
            f"  {side:<8} {tokens / sum(r['latency_s'] for r in mine):7.2f} tok/s over its requests; server "
            f"e2e {statistics.median(r['server']['e2e_s'] for r in mine) * 1000:6.1f} ms, decode "
            f"{statistics.median(r['server']['decode_s'] for r in mine) * 1000:6.1f} ms, prefill "
            f"{statistics.median(r['server']['prefill_s'] for r in mine) * 1000:5.1f} ms (medians)"
        )


if __name__ == "__main__":
    main()
