"""A synthetic serving landscape shaped like the Fast Gemma Challenge's.

Three integer knobs of the ``gemma4-e4b-a10g`` preset: the sliding window W
(128-512), the drafter's centroid top-k C (16-128) and the number of
speculative tokens K (1-8). Each seed draws its own landscape:

* PPL depends on W only: ``2.30 + A exp(-(W - 128) / lambda)``, with the
  gate (PPL <= 2.42) crossed at a window drawn from 140-230 (128 broke
  the gate in the challenge, 188-192 was the sweet spot).
* TPS = tokens per verification step / time per step (x a scale putting
  the VIDRAFT config W188/C49/K7 near its 510 TPS). Tokens per step follow the
  measured per-position acceptance (0.69 then x0.79 per position), scaled by
  the drafter's accuracy ``1 - exp(-C / tau)`` and slightly by the window;
  a step costs the target's forward (cheaper for smaller windows, a little
  dearer per extra token to verify) plus K drafter passes whose cost grows
  with C (C=256 about halves TPS, as reported).
* Every TPS measurement carries 1 % Gaussian noise; PPL is deterministic.

Optimum per seed: K 5-8, C 30-70, W just above the gate's boundary; about
0.3 % of the grid is within 1 % of the best feasible TPS.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from sweeper.study import Measurement

PPL_CAP = 2.42
REFERENCE_PPL = 2.30


@dataclasses.dataclass(frozen=True, kw_only=True)
class LandscapeShape:
    boundary: float  # the window where PPL crosses the cap
    decay: float  # lambda of the PPL curve
    window_speed: float  # TPS gain from W=512 to W=128 at equal acceptance
    first_acceptance: float
    acceptance_ratio: float
    accuracy_scale: float  # tau of 1 - exp(-C / tau)
    window_acceptance: float  # acceptance lost from W=512 to W=128
    verify_cost: float  # per extra verified token, relative to a target step
    draft_cost: float  # per drafter pass, fixed part
    draft_cost_per_k: float  # per drafter pass and centroid


def draw_shape(seed: int) -> LandscapeShape:
    rng = np.random.default_rng(seed)
    return LandscapeShape(
        boundary=rng.uniform(140, 230),
        decay=rng.uniform(40, 90),
        window_speed=rng.uniform(0.08, 0.2),
        first_acceptance=rng.uniform(0.62, 0.76),
        acceptance_ratio=rng.uniform(0.72, 0.85),
        accuracy_scale=math.exp(rng.uniform(math.log(8), math.log(22))),
        window_acceptance=rng.uniform(0.0, 0.02),
        verify_cost=rng.uniform(0.008, 0.02),
        draft_cost=rng.uniform(0.0, 0.01),
        draft_cost_per_k=rng.uniform(0.0005, 0.0008),
    )


class Landscape:
    """An ``Evaluator`` for run_study, plus the truth to score a search against."""

    def __init__(self, seed: int, *, noise: float = 0.01) -> None:
        self.shape = draw_shape(seed)
        self.noise = noise
        self._rng = np.random.default_rng(seed + 10_000)
        self._scale = 1.0
        self._scale = 510.0 / float(self.true_tps(188, 49, 7))
        grid = np.meshgrid(
            np.arange(128, 513, 4), np.arange(16, 129), np.arange(1, 9), indexing="ij"
        )
        tps = self.true_tps(*grid)
        feasible = self.ppl(grid[0]) <= PPL_CAP
        self.best_tps = float(tps[feasible].max())
        self.near_best_fraction = float((feasible & (tps >= 0.99 * self.best_tps)).mean())

    def ppl(self, window: Any) -> Any:
        s = self.shape
        amplitude = (PPL_CAP - REFERENCE_PPL) * math.exp((s.boundary - 128) / s.decay)
        return REFERENCE_PPL + amplitude * np.exp(-(np.asarray(window, float) - 128) / s.decay)

    def true_tps(self, window: Any, top_k: Any, tokens: Any) -> Any:
        s = self.shape
        w, c, k = (np.asarray(v, float) for v in (window, top_k, tokens))
        narrowing = (512 - w) / 384
        accuracy = (1 - np.exp(-c / s.accuracy_scale)) * (1 - s.window_acceptance * narrowing)
        first, ratio = s.first_acceptance * accuracy, s.acceptance_ratio * accuracy
        tokens_per_step = 1 + first * (1 - ratio**k) / (1 - ratio)
        target = (1 + s.verify_cost * k) / (1 + s.window_speed * narrowing)
        step = target + k * (s.draft_cost + s.draft_cost_per_k * c)
        return self._scale * tokens_per_step / step

    def tps_of(self, params: Mapping[str, Any]) -> float:
        return float(
            self.true_tps(
                params["sliding_window"], params["centroid_top_k"], params["num_speculative_tokens"]
            )
        )

    def is_near_best(self, params: Mapping[str, Any], within: float = 0.01) -> bool:
        """Feasible and within ``within`` of the best feasible TPS (noise-free)."""
        feasible = float(self.ppl(params["sliding_window"])) <= PPL_CAP
        return feasible and self.tps_of(params) >= (1 - within) * self.best_tps

    def __call__(self, params: Mapping[str, Any], context: Any = None) -> Measurement:
        noisy = self.tps_of(params) * (1 + self.noise * float(self._rng.standard_normal()))
        return Measurement(tps=noisy, ppl=float(self.ppl(params["sliding_window"])))
