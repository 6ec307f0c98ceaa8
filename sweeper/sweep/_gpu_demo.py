"""The demo on its GPU manifest: the demo's own data, sizes, budget and noise wherever a run's
options give none (``sweeper run`` with no manifest, where a GPU is seen)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweeper.demo import demo_paths
from sweeper.sweep._plan import DEMO_SIZES, DEMO_TRIALS, GPU_DEMO_NOISE


def gpu_demo_options(options: Mapping[str, Any], manifest: str) -> dict[str, Any]:
    """``options`` (``RunPlan``'s fields, by name) for the demo on ``manifest``, its GPU manifest:
    the demo's tuning data, sizes, budget and noise where an option is None."""
    demo = demo_paths()
    defaults = {
        "prompts": str(demo.prompts_tuning),
        "ppl_data": str(demo.ppl_tuning),
        "num_prompts": DEMO_SIZES.num_prompts,
        "output_len": DEMO_SIZES.output_len,
        "warmup_requests": DEMO_SIZES.warmup_requests,
        "n_trials": DEMO_TRIALS,
        "noise": GPU_DEMO_NOISE,
    }
    filled = {key: value if options.get(key) is None else options[key] for key, value in defaults.items()}
    return {**options, **filled, "manifest": manifest}
