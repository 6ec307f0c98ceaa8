"""A stored study shaped like the CPU demo's, for the report's tests: no servers, real SQLite and Optuna.

The base manifest (w=0, k=1) and four searched configurations: two that only change the
speculative tokens ``k`` (so they share the base's PPL, as speed-only knobs do), one over the
cap (stopped early: its TPS is the slowest seen, imputed), one of another window. The fastest
first reading (w=0, k=3) wins a race against the base; its first reading selected it and
the claim rests on its re-measurements, paired with the base's of the same rounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from search_spaces import space_from_dict
from sweeper.errors import MeasurementError
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, run_study

CAP = 2.26
SPACE = space_from_dict(
    {
        "name": "demo-like",
        "parameters": [
            {"name": "w", "type": "int", "low": 0, "high": 3, "affects": "quality", "default": 0, "env": "W"},
            {"name": "k", "type": "int", "low": 1, "high": 4, "affects": "speed", "default": 1, "env": "K"},
        ],
    },
    source="demo-like.yaml",
).bind({})
PPL = {0: 2.21, 1: 2.23, 2: 4.97, 3: 2.19}  # by w; k leaves the PPL alone
# each configuration's readings in the order its servers run (the same list again if more are asked)
READINGS: dict[tuple[int, int], list[float]] = {
    (0, 1): [158.3, 160.1, 157.2, 161.0, 159.4],
    (0, 2): [185.0],
    (0, 3): [215.0, 199.5, 197.8, 201.1, 198.3],
    (2, 1): [],  # over the cap, stopped early: no TPS
    (1, 3): [176.0],
    (3, 4): [5.0],  # never reached: k=4 crashes
}
SEARCHED = [{"w": 0, "k": 2}, {"w": 0, "k": 3}, {"w": 2, "k": 1}, {"w": 1, "k": 3}, {"w": 3, "k": 4}]


@dataclasses.dataclass(frozen=True)
class DemoLikeStudy:
    url: str
    name: str
    used: dict[tuple[int, int], list[float]]  # what each configuration's servers read, in order


def make_demo_like(folder: Path, name: str = "demo-like") -> DemoLikeStudy:
    used: dict[tuple[int, int], list[float]] = {key: [] for key in READINGS}

    def evaluate(params: Mapping[str, int], context) -> Measurement:
        key = (params["w"], params["k"])
        if params["k"] == 4:
            raise MeasurementError("scripted crash with 4 speculative tokens")
        if params["w"] == 2:
            return Measurement(tps=None, ppl=PPL[2], early_stopped=True)
        figures = READINGS[key]
        used[key].append(figures[len(used[key]) % len(figures)])
        return Measurement(tps=used[key][-1], ppl=PPL[params["w"]])

    url = f"sqlite:///{folder / 'demo-like.db'}"
    run_study(
        SPACE,
        evaluate,
        StudyOptions(
            study_name=name,
            storage=url,
            n_trials=len(SEARCHED) + 1,
            gate=PplGate(cap=CAP),
            sampler="random",
            seed=0,
            enqueue=SEARCHED,
            enqueue_base=True,
            confirm=ConfirmSettings(rounds=2, noise=0.10, prior_df=2.0),
            handle_signals=False,
        ),
    )
    return DemoLikeStudy(url=url, name=name, used=used)
