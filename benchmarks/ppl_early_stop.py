"""The PPL gate's early stop: how often it stops a configuration that meets the cap, and what it saves.

Simulated PPL record sets (token counts from the challenge's public PPL file
when ``../shared/challenge-data`` is present, else drawn), each record with
its own per-token NLL around the population's; the records are scored in a
random order, as ``measure_ppl`` does, and the rule looks after each one.

    python -m benchmarks.ppl_early_stop [--sims 4000] [--records 128]

Rules compared, all at 99 %:
- ``fixed+fpc``: the rule before this benchmark (one-sided 99 % bound at
  every look, standard error with the finite-population correction);
- ``fixed``: the same without the correction;
- ``seq/1``: ``EarlyStopRule`` (alpha spending over the looks), a look
  after every record;
- ``seq/8``: the same with a look every 8 records (the default).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np

from evaluators import EarlyStopRule

CAP = 2.42
CHALLENGE_PPL = Path(__file__).resolve().parents[2] / "shared" / "challenge-data" / "ppl_ground_truth_tokens.jsonl"


def token_counts(records: int, rng: np.random.Generator) -> np.ndarray:
    if CHALLENGE_PPL.is_file():
        with open(CHALLENGE_PPL) as handle:
            counts = [len(json.loads(line)["target_token_ids"]) for line in handle if line.strip()]
        return np.asarray(rng.choice(counts, size=records, replace=len(counts) < records), float)
    return rng.integers(50, 1500, records).astype(float)


def population(ppl: float, spread: float, records: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-record NLL sums and token counts whose token-weighted PPL is exactly ``ppl``."""
    rng = np.random.default_rng(seed)
    tokens = token_counts(records, rng)
    per_token = rng.normal(0.0, spread, records)
    per_token += math.log(ppl) - float((per_token * tokens).sum() / tokens.sum())
    return per_token * tokens, tokens


def first_stops(nll, tokens, sims, rng, boundary, *, fpc: bool, min_records: int = 16) -> np.ndarray:
    """The record count at which each simulated run stops (len(nll): it never stopped)."""
    n = len(nll)
    order = np.argsort(rng.random((sims, n)), axis=1)
    a, t = nll[order], tokens[order]
    count = np.arange(1, n + 1)
    total_nll, total_tokens = np.cumsum(a, 1), np.cumsum(t, 1)
    mean = total_nll / total_tokens
    squares = np.cumsum(a * a, 1) - 2 * mean * np.cumsum(a * t, 1) + mean**2 * np.cumsum(t * t, 1)
    variance = np.maximum(squares, 0.0) / np.maximum(count - 1, 1)
    correction = np.maximum(0.0, 1.0 - count / n) if fpc else 1.0
    stderr = np.sqrt(correction * variance / count) / (total_tokens / count)
    z = np.array([boundary(int(c)) for c in count])
    with np.errstate(invalid="ignore"):
        stop = mean - z * stderr > math.log(CAP)
    stop[:, : min_records - 1] = False
    stop[:, n - 1 :] = False  # after the last record the PPL is known: no early stop
    return np.where(stop.any(1), stop.argmax(1) + 1, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=4000)
    parser.add_argument("--records", type=int, default=128)
    parser.add_argument("--populations", type=int, default=5)
    args = parser.parse_args()
    n = args.records
    every_record = EarlyStopRule(alpha=0.01, min_records=16, population=n, look_every=1)
    default = EarlyStopRule(alpha=0.01, min_records=16, population=n)
    fixed_z = statistics.NormalDist().inv_cdf(0.99)
    rules = {
        "fixed+fpc": (lambda c: fixed_z, True),
        "fixed": (lambda c: fixed_z, False),
        "seq/1": (every_record.boundary, False),
        f"seq/{default.look_every}": (default.boundary, False),
    }
    source = "challenge token counts" if CHALLENGE_PPL.is_file() else "drawn token counts"
    print(f"{args.sims} runs x {args.populations} populations of {n} records ({source}), cap {CAP}")
    print("\nwrong stops: true PPL exactly at the cap (the worst case a 99 % rule must hold to 1 %)")
    print(f"{'spread':>7} " + " ".join(f"{name:>12}" for name in rules))
    rng = np.random.default_rng(0)
    for spread in (0.1, 0.3, 0.6):
        cells = []
        for boundary, fpc in rules.values():
            rates = [
                float((first_stops(*population(CAP, spread, n, seed), args.sims, rng, boundary, fpc=fpc) < n).mean())
                for seed in range(args.populations)
            ]
            cells.append(f"{100 * max(rates):5.2f}% max")
        print(f"{spread:>7} " + " ".join(f"{cell:>12}" for cell in cells))
    print(f"\nconfigurations over the cap (spread 0.3): share stopped early, mean records scored of {n}")
    print(f"{'PPL':>7} " + " ".join(f"{name:>18}" for name in rules))
    for over in (1.02, 1.05, 1.10, 1.25, 2.0):
        cells = []
        for boundary, fpc in rules.values():
            stops = np.concatenate(
                [
                    first_stops(*population(CAP * over, 0.3, n, seed), args.sims // 4, rng, boundary, fpc=fpc)
                    for seed in range(args.populations)
                ]
            )
            cells.append(f"{100 * float((stops < n).mean()):5.1f}% {float(stops.mean()):6.1f}")
        print(f"{CAP * over:>7.3f} " + " ".join(f"{cell:>18}" for cell in cells))


if __name__ == "__main__":
    main()
