"""A family of synthetic serving landscapes shaped like the Fast Gemma Challenge's.

The knobs are those of the ``gemma4-e4b-a10g`` preset, the sliding window W
(128-512, step 4), the drafter's centroid top-k C (16-128, log) and the
number of speculative tokens K (1-8), plus one knob of our own that does
nothing: ``max_num_seqs`` (8-64), added to the preset's space through the
search-space format (``search_space()``). Each seed draws a landscape of its
own; what changes from one to the next:

* **Where the gate's boundary falls.** PPL depends on W only and falls
  monotonically toward the model's own value as the window widens:
  ``2.30 + A exp(-((W - 128) / lambda) ** p)``, the shape ``p`` 0.7-1.4 and
  ``lambda`` 30-150, scaled so that the cap (PPL 2.42) is crossed at a
  boundary window drawn over the whole range. The seed picks the third of
  the range it falls in (seed % 3: 140-250, 250-370, 370-490), so a few
  seeds cover narrow, middle and wide boundaries alike.
* **How fast the drafter's benefit saturates.** Tokens per verification
  step follow a per-position acceptance: ``a`` (0.55-0.80) for the first
  drafted token, then x ``r`` per position (0.55-0.90: a small ``r``
  saturates after two or three tokens, a large one keeps paying up to 8).
  The drafter's accuracy scales both as ``1 - exp(-C / tau)``, with ``tau``
  log-uniform in 5-45 (a small ``tau`` saturates at the smallest top-k).
  A narrower window costs a little acceptance (0-3 % from 512 to 128).
* **What a draft pass costs.** A step is the target's forward (cheaper for a
  smaller window by a factor drawn in 8-30 % from 512 to 128, and 0.5-3 %
  dearer per extra token to verify) plus K draft passes, each costing a
  fixed 2-10 % of a target step plus 0.02-0.15 % per centroid.
* **A dead knob.** ``max_num_seqs`` is in the space and has no effect.

TPS = tokens per step / time per step, scaled so that the best feasible
configuration of every landscape runs at about 500 TPS. The best K spans
2-8 and the best top-k the whole 16-128 range over the seeds.

Noise is a parameter: every TPS measurement is multiplied by ``1 + noise *
N(0, 1)`` (the benchmark uses 1 % and 5 %); PPL is deterministic. Scoring a
search uses the noise-free TPS (``is_near_best``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

import search_spaces
from search_spaces import SearchSpace, space_from_dict
from sweeper.study import Measurement

PPL_CAP = 2.42
REFERENCE_PPL = 2.30
PRESET = "gemma4-e4b-a10g"
DEAD_KNOB = "max_num_seqs"
DEAD_KNOB_SPEC = {
    "name": DEAD_KNOB,
    "type": "int",
    "low": 8,
    "high": 64,
    "affects": "speed",
    "default": 32,
    "env": "MAX_NUM_SEQS",
}
BOUNDARY_ZONES = ((140.0, 250.0), (250.0, 370.0), (370.0, 490.0))
TARGET_BEST_TPS = 500.0

WINDOWS = np.arange(128, 513, 4)
TOP_KS = np.arange(16, 129)
TOKENS = np.arange(1, 9)


def search_space(*, dead_knob: bool = True) -> SearchSpace:
    """The preset's space read from its YAML file, with the dead knob appended (unbound)."""
    preset = Path(search_spaces.__file__).resolve().parent / "presets" / f"{PRESET}.yaml"
    data = yaml.safe_load(preset.read_text(encoding="utf-8"))
    if dead_knob:
        data["name"] = f"{PRESET}+{DEAD_KNOB}"
        data["parameters"].append(dict(DEAD_KNOB_SPEC))
    return space_from_dict(data, source=f"{PRESET} with {DEAD_KNOB}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LandscapeShape:
    boundary: float  # the window where PPL crosses the cap
    decay: float  # lambda of the PPL curve
    power: float  # p of the PPL curve
    window_speed: float  # target step saved from W=512 to W=128
    first_acceptance: float
    acceptance_ratio: float
    accuracy_scale: float  # tau of 1 - exp(-C / tau)
    window_acceptance: float  # acceptance lost from W=512 to W=128
    verify_cost: float  # per extra verified token, relative to a target step
    draft_cost: float  # per draft pass, fixed part
    draft_cost_per_k: float  # per draft pass and centroid


def draw_shape(seed: int) -> LandscapeShape:
    rng = np.random.default_rng([seed, 2026])
    low, high = BOUNDARY_ZONES[seed % len(BOUNDARY_ZONES)]
    return LandscapeShape(
        boundary=rng.uniform(low, high),
        decay=rng.uniform(30, 150),
        power=rng.uniform(0.7, 1.4),
        window_speed=rng.uniform(0.08, 0.3),
        first_acceptance=rng.uniform(0.55, 0.80),
        acceptance_ratio=rng.uniform(0.55, 0.90),
        accuracy_scale=math.exp(rng.uniform(math.log(5), math.log(45))),
        window_acceptance=rng.uniform(0.0, 0.03),
        verify_cost=rng.uniform(0.005, 0.03),
        draft_cost=rng.uniform(0.02, 0.10),
        draft_cost_per_k=rng.uniform(0.0002, 0.0015),
    )


class Landscape:
    """An ``Evaluator`` for run_study, plus the truth to score a search against."""

    def __init__(self, seed: int, *, noise: float = 0.01, shape: LandscapeShape | None = None) -> None:
        self.seed = seed
        self.shape = shape or draw_shape(seed)  # a family of one's own: its own draw
        self.noise = noise
        self._rng = np.random.default_rng([seed, int(round(noise * 1e4)), 7])
        self._scale = 1.0
        grid = np.meshgrid(WINDOWS, TOP_KS, TOKENS, indexing="ij")
        tps = self.true_tps(*grid)
        feasible = self.ppl(grid[0]) <= PPL_CAP
        self._scale = TARGET_BEST_TPS / float(tps[feasible].max())
        tps = tps * self._scale
        self.best_tps = float(tps[feasible].max())
        near = feasible & (tps >= 0.99 * self.best_tps)
        self.near_best_fraction = float(near.mean())
        index = np.unravel_index(int(np.argmax(np.where(feasible, tps, -1.0))), tps.shape)
        self.best = {
            "sliding_window": int(WINDOWS[index[0]]),
            "centroid_top_k": int(TOP_KS[index[1]]),
            "num_speculative_tokens": int(TOKENS[index[2]]),
        }

    def ppl(self, window: Any) -> Any:
        s = self.shape
        x = np.maximum(np.asarray(window, float) - 128, 0.0) / s.decay
        at_boundary = math.exp(-(((s.boundary - 128) / s.decay) ** s.power))
        amplitude = (PPL_CAP - REFERENCE_PPL) / at_boundary
        return REFERENCE_PPL + amplitude * np.exp(-(x**s.power))

    def true_tps(self, window: Any, top_k: Any, tokens: Any) -> Any:
        s = self.shape
        w, c, k = (np.asarray(v, float) for v in (window, top_k, tokens))
        narrowing = (512 - w) / 384
        accuracy = (1 - np.exp(-c / s.accuracy_scale)) * (1 - s.window_acceptance * narrowing)
        first, ratio = s.first_acceptance * accuracy, s.acceptance_ratio * accuracy
        tokens_per_step = 1 + first * (1 - ratio**k) / (1 - ratio)
        target = (1 + s.verify_cost * (k - 1)) * (1 - s.window_speed * narrowing)
        step = target + k * (s.draft_cost + s.draft_cost_per_k * c)
        return self._scale * tokens_per_step / step

    def tps_of(self, params: Mapping[str, Any]) -> float:
        return float(
            self.true_tps(params["sliding_window"], params["centroid_top_k"], params["num_speculative_tokens"])
        )

    def is_feasible(self, params: Mapping[str, Any]) -> bool:
        return float(self.ppl(params["sliding_window"])) <= PPL_CAP

    def is_near_best(self, params: Mapping[str, Any], within: float = 0.01) -> bool:
        """Feasible and within ``within`` of the best feasible TPS (noise-free)."""
        return self.is_feasible(params) and self.tps_of(params) >= (1 - within) * self.best_tps

    def __call__(self, params: Mapping[str, Any], context: Any = None) -> Measurement:
        noisy = self.tps_of(params) * (1 + self.noise * float(self._rng.standard_normal()))
        return Measurement(tps=noisy, ppl=float(self.ppl(params["sliding_window"])))
