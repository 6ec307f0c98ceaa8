#!/usr/bin/env python
"""Does measuring PPL before TPS in the same server change the TPS reading?

A study's trial scores the PPL records first and then runs the warm-up and
the TPS benchmark in the same server (``sweeper.measure.evaluate``); a
re-run of an exported answer (``sweeper rerun``, and the organizers' TPS
run) measures TPS in a server that scored nothing before. If the PPL phase
leaves the server faster or slower, and by a different amount for
different configurations, a study's ratio over its base is not what a
re-run reads.

Each round starts, for each manifest, one fresh server with PPL first and
one with TPS only; the four servers of a round run in an order that
alternates from round to round. It prints every reading, the geometric
mean per (manifest, mode), the ratio PPL-first / TPS-only per manifest
with a paired t-interval over the rounds, and the answer / base ratio
under each mode.

    python benchmarks/ppl_then_tps.py ANSWER.json BASE.json --rounds 3
    python benchmarks/ppl_then_tps.py ANSWER.json BASE.json --num-prompts 128 --output-len 512

Sizes default to the CPU demo's (8 prompts x 128 tokens, 1 warm-up request,
the demo's tuning prompts and PPL records).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators import PplSettings, TpsSettings  # noqa: E402
from sweeper.answer import paired_ratio_interval  # noqa: E402
from sweeper.manifest import Manifest  # noqa: E402
from sweeper.measure import EvalSettings, evaluate, load_eval_data  # noqa: E402

MODES = ("ppl-first", "tps-only")


def round_order(index: int) -> list[tuple[str, str]]:
    """The four servers of round ``index`` (0-based): manifests and modes both alternate."""
    who = ["answer", "base"] if index % 2 == 0 else ["base", "answer"]
    modes = list(MODES) if (index // 2) % 2 == 0 else list(reversed(MODES))
    return [(w, m) for w in who for m in modes]


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def describe(ratio) -> str:
    return f"{ratio.value:.3f} (95 % {ratio.low:.3f}-{ratio.high:.3f}, {ratio.method})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("answer", type=Path, help="the answer's manifest")
    parser.add_argument("base", type=Path, help="the base manifest")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--warmup-requests", type=int, default=1)
    parser.add_argument("--ppl-records", type=int, default=None, help="score only the first N records")
    parser.add_argument("--json", type=Path, default=None, help="write every reading here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    manifests = {"answer": Manifest.load(args.answer), "base": Manifest.load(args.base)}
    tps = TpsSettings(num_prompts=args.num_prompts, output_len=args.output_len, warmup_requests=args.warmup_requests)
    settings = {
        "ppl-first": EvalSettings(tps=tps, ppl=PplSettings(max_records=args.ppl_records)),
        "tps-only": EvalSettings(tps=tps, ppl=None),
    }
    data = {mode: load_eval_data(manifests["base"], s) for mode, s in settings.items()}
    readings: dict[tuple[str, str], list[float]] = {(w, m): [] for w in manifests for m in MODES}
    log = []
    began = time.time()
    for index in range(args.rounds):
        for who, mode in round_order(index):
            result = evaluate(manifests[who], settings[mode], data=data[mode])
            value = float(result.tps.tps)
            readings[(who, mode)].append(value)
            ppl = None if result.ppl is None else result.ppl.ppl
            log.append({"round": index + 1, "manifest": who, "mode": mode, "tps": value, "ppl": ppl})
            print(
                f"round {index + 1}: {who:6s} {mode:9s} {value:8.2f} tok/s"
                + ("" if ppl is None else f"  (PPL {ppl:.4f})"),
                flush=True,
            )
    print(f"\n{args.rounds} round(s), {4 * args.rounds} servers, {time.time() - began:.0f} s")
    for (who, mode), values in readings.items():
        print(
            f"  {who:6s} {mode:9s} geometric mean {geometric_mean(values):8.2f}  ({', '.join(f'{v:.1f}' for v in values)})"
        )
    if args.rounds >= 2:
        for who in manifests:
            pairs = list(zip(readings[(who, "ppl-first")], readings[(who, "tps-only")]))
            print(f"  {who}: PPL-first / TPS-only {describe(paired_ratio_interval(pairs))}")
        for mode in MODES:
            pairs = list(zip(readings[("answer", mode)], readings[("base", mode)]))
            print(f"  answer / base, {mode}: {describe(paired_ratio_interval(pairs))}")
    if args.json is not None:
        args.json.write_text(json.dumps(log, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
