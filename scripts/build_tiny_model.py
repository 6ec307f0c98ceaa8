#!/usr/bin/env python
"""Build the bundled tiny Gemma 4 demo model, its MTP drafter and the demo data.

    python scripts/build_tiny_model.py            # full build (trains; ~15 min on 2 cores)
    python scripts/build_tiny_model.py --random   # untrained weights, for plumbing tests

Writes into sweeper/demo/data/: model/, drafter/, prompts_*.json, ppl_*.jsonl,
manifest.json. See docs/tiny-model.md.
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--target-seconds", type=float, default=None, help="target training time")
    parser.add_argument("--drafter-seconds", type=float, default=None, help="drafter training time")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    settings = BuildSettings(out=args.out, train=not args.random, threads=args.threads)
    if args.target_seconds is not None:
        settings = settings.replace(target_seconds=args.target_seconds)
    if args.drafter_seconds is not None:
        settings = settings.replace(drafter_seconds=args.drafter_seconds)
    started = time.monotonic()
    build(settings)
    logger.info("build finished in %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
