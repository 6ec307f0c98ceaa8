"""A toy search space and landscape with a known answer, for the study tests.

``w`` (1-16) is the quality knob, faster when lower; ``k`` (1-4) a speed knob.
PPL = 1 + 1/w, so the cap 1.2 passes w >= 5; TPS = 100 + 10 (16 - w) + 5 k.
The best gate-passing config is w=5, k=4 (TPS 230); w=1, k=4 is faster (270)
and over the cap.
"""

from __future__ import annotations

from search_spaces import space_from_dict
from sweeper.study import Measurement

CAP = 1.2
BEST = {"w": 5, "k": 4}
BEST_TPS = 230.0

SPACE = space_from_dict(
    {
        "name": "toy",
        "parameters": [
            {
                "name": "w",
                "type": "int",
                "low": 1,
                "high": 16,
                "affects": "quality",
                "faster": "lower",
                "default": 16,
                "resolution": 1,
                "env": "W",
            },
            {
                "name": "k",
                "type": "int",
                "low": 1,
                "high": 4,
                "affects": "speed",
                "default": 1,
                "env": "K",
            },
        ],
    },
    source="toy.yaml",
).bind({})

# a sample of the space around the answer: the fastest configs fail the gate
CONFIGS = [{"w": w, "k": k} for w in (1, 3, 5, 6, 10, 16) for k in (1, 4)]


def tps(params) -> float:
    return 100.0 + 10.0 * (16 - params["w"]) + 5.0 * params["k"]


def ppl(params) -> float:
    return 1.0 + 1.0 / params["w"]


def evaluate(params, context) -> Measurement:
    return Measurement(tps=tps(params), ppl=ppl(params))
