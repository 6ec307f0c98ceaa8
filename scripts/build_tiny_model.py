#!/usr/bin/env python
"""Build the bundled tiny Gemma 4 demo model, its MTP drafter and the demo data.

    python scripts/build_tiny_model.py              # full build (trains the target and the drafter)
    python scripts/build_tiny_model.py --random     # untrained weights of the final shape, in seconds
    python scripts/build_tiny_model.py --out DIR    # build elsewhere (default: the package data)

Writes into sweeper/demo/data/: model/, drafter/, prompts_*.json, ppl_*.jsonl,
manifest.json. See docs/tiny-model.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tinymodel.build import BuildSettings, build  # noqa: E402

logger = logging.getLogger("build_tiny_model")

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "sweeper" / "demo" / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--random", action="store_true", help="skip training (untrained weights)")
    parser.add_argument("--target-steps", type=int, default=None, help="target training steps")
    parser.add_argument("--drafter-steps", type=int, default=None, help="drafter fine-tuning steps")
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads (1 is faster on a machine other jobs load)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    settings = BuildSettings(out=args.out, train=not args.random, threads=args.threads)
    if args.target_steps is not None:
        settings = settings.replace(
            target_training=dataclasses.replace(settings.target_training, steps=args.target_steps)
        )
    if args.drafter_steps is not None:
        settings = settings.replace(
            drafter_training=dataclasses.replace(settings.drafter_training, steps=args.drafter_steps)
        )
    started = time.monotonic()
    report = build(settings)
    report["build_seconds"] = round(time.monotonic() - started)
    logger.info("build finished in %.0f s: %s", time.monotonic() - started, json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
