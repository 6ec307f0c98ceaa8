"""One ``evaluators.measure_tps`` run against a running server, in a process of its own.

The parity benchmark (``tps_vs_harness_client.py``) runs this as a child,
as the harness runs its client: a fresh interpreter per run. It measures
with ``TpsSettings``'s defaults but for the size (and ``--connection``), and writes the result, each
request's end time (from the progress callback, ``time.perf_counter`` of
this process) and this process's own CPU time to ``--out`` as JSON.
``--idle-before-s`` waits that long before the warm-up, so the server idles
before the run as long as it does while the harness's client starts (it
loads its tokenizer and prompts for some 10 s; this process takes 2-3 s)::

    python benchmarks/tps_ours_client.py --base-url URL --model NAME --prompts FILE \\
        --num-prompts 128 --output-len 512 [--idle-before-s 8.5] --out RESULT.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators import TpsSettings, load_prompts, measure_tps  # noqa: E402
from evaluators.tps import CONNECTIONS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--prompts", required=True, help="a ShareGPT JSON file")
    parser.add_argument("--num-prompts", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=512)
    parser.add_argument(
        "--connection",
        choices=CONNECTIONS,
        default=TpsSettings.connection,
        help="harness: a connection per request; keep-alive: one for the run",
    )
    parser.add_argument(
        "--idle-before-s",
        type=float,
        default=0.0,
        help="seconds to wait before the warm-up, the server idle (default 0)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not 0 <= args.idle_before_s <= 600:
        parser.error(f"--idle-before-s: 0 to 600 seconds, not {args.idle_before_s}")
    started = time.perf_counter()
    started_unix = time.time()
    prompts = load_prompts(args.prompts)
    settings = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, connection=args.connection)
    ends: list[float] = []
    marks: dict[str, float] = {}
    idle_began = time.perf_counter()
    time.sleep(args.idle_before_s)
    idled = time.perf_counter() - idle_began

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "tps":
            ends.append(time.perf_counter())
        elif phase == "tps warm-up":
            marks["warmup_done"] = time.perf_counter()
            marks["warmup_cpu"] = sum(os.times()[:2])

    result = measure_tps(args.base_url, args.model, prompts, settings, progress=progress)
    finished = time.perf_counter()
    times = os.times()
    Path(args.out).write_text(
        json.dumps(
            {
                "result": result.to_dict(),
                "started_unix": started_unix,  # the unix time of ``started``, which the other times count from
                "request_ends_s": [t - started for t in ends],
                "warmup_done_s": marks.get("warmup_done", started) - started,
                "process_s": finished - started,
                "idle_before_s": idled,
                "self_cpu_s": times.user + times.system,
                # from the warm-up's end (the 1 s pause, then the timed requests) to the end
                "window_cpu_s": times.user + times.system - marks.get("warmup_cpu", 0.0),
            }
        )
    )
    if not result.ok:
        print(f"measure_tps failed: {result.first_error}", file=sys.stderr)
        raise SystemExit(1)
    print(f"ours {result.tps:.2f} tok/s: {result.output_tokens} tokens in {result.duration_s:.2f} s")


if __name__ == "__main__":
    main()
