"""Studies made with run_study and a synthetic evaluator: real SQLite, real Optuna, no servers.

Shared by tests/verify, tests/export, tests/report and tests/cli (each conftest loads this
file by path, since the tests are imported without a package).

The synthetic model of the demo's knobs: a smaller sliding window is faster and raises PPL
(the cap 2.30 holds for windows of 34 and up), more speculative tokens are faster, a
centroid top-k away from 8 is slower; 6 speculative tokens crash the "server".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from search_spaces import load_preset
from sweeper.demo import demo_paths
from sweeper.errors import MeasurementError
from sweeper.manifest import Manifest
from sweeper.study import Measurement, PplGate, StudyOptions, StudyRecipe, run_study, save_recipe

CAP = 2.30

# label -> params; the base manifest (w32 ctk8 k1) is the baseline trial 0
CONFIGS: dict[str, dict[str, int]] = {
    "A": {"sliding_window": 48, "centroid_top_k": 8, "num_speculative_tokens": 3},  # 147, 2.16
    "B": {"sliding_window": 40, "centroid_top_k": 8, "num_speculative_tokens": 5},  # 173, 2.24
    "C": {"sliding_window": 36, "centroid_top_k": 4, "num_speculative_tokens": 4},  # 174, 2.28 best
    "D": {"sliding_window": 24, "centroid_top_k": 8, "num_speculative_tokens": 3},  # 195, 2.40 over
    "E": {"sliding_window": 44, "centroid_top_k": 8, "num_speculative_tokens": 6},  # fails
}
INFEASIBLE_CONFIGS = {
    "D": CONFIGS["D"],
    "F": {"sliding_window": 16, "centroid_top_k": 8, "num_speculative_tokens": 3},
}


def synthetic_tps(params: Mapping[str, Any]) -> float:
    return (
        100.0
        + 2.0 * (64 - params["sliding_window"])
        + 5.0 * params.get("num_speculative_tokens", 1)
        - 0.5 * abs(params.get("centroid_top_k", 8) - 8)
    )


def synthetic_ppl(params: Mapping[str, Any]) -> float:
    return 2.0 + 0.01 * (64 - params["sliding_window"])


def synthetic_evaluator(
    *, tps_factor: float | Callable[[int], float] = 1.0, ppl_shift: float = 0.0
) -> Callable[[Mapping[str, Any], Any], Measurement]:
    """evaluate(params, context) -> TPS/PPL from the formulas; k=6 raises MeasurementError.

    ``tps_factor`` may depend on ``context.number`` (the repeat, in verification).
    """

    def evaluate(params: Mapping[str, Any], context: Any) -> Measurement:
        if params.get("num_speculative_tokens") == 6:
            raise MeasurementError("synthetic server crashed with 6 speculative tokens")
        factor = tps_factor(context.number) if callable(tps_factor) else tps_factor
        with context.phase("start"):
            pass
        return Measurement(
            tps=synthetic_tps(params) * factor,
            ppl=synthetic_ppl(params) + ppl_shift,
            phases={"ppl": 1.5, "tps": 4.0},
        )

    return evaluate


@dataclasses.dataclass(frozen=True)
class SyntheticStudy:
    url: str
    name: str
    db: Path

    def number(self, params: Mapping[str, Any]) -> int:
        from storage import TrialStore

        store = TrialStore(self.url)
        try:
            for record in store.records(self.name):
                if dict(record.params) == dict(params):
                    return record.number
        finally:
            store.close()
        raise LookupError(params)


def make_study(
    folder: Path,
    *,
    name: str = "synthetic",
    configs: Sequence[Mapping[str, int]] = tuple(CONFIGS.values()),
    base_manifest: Path | None = None,
    recipe: bool = True,
) -> SyntheticStudy:
    """A finished study of the baseline + ``configs`` (in order), cap 2.30."""
    db = folder / f"{name}.db"
    url = f"sqlite:///{db}"
    manifest_path = base_manifest or demo_paths().manifest
    manifest = Manifest.load(manifest_path)
    space = load_preset("tiny-cpu").bind(manifest.env)
    run_study(
        space,
        synthetic_evaluator(),
        StudyOptions(
            study_name=name,
            storage=url,
            n_trials=len(configs) + 1,
            gate=PplGate(cap=CAP),
            sampler="random",
            seed=0,
            enqueue=list(configs),
            handle_signals=False,
        ),
    )
    if recipe:
        save_recipe(url, name, StudyRecipe(base_manifest=str(manifest_path), num_prompts=4, output_len=16))
    return SyntheticStudy(url=url, name=name, db=db)


def make_empty_study(folder: Path, name: str = "empty") -> SyntheticStudy:
    import optuna

    db = folder / f"{name}.db"
    url = f"sqlite:///{db}"
    optuna.create_study(study_name=name, storage=url, direction="maximize")
    return SyntheticStudy(url=url, name=name, db=db)


def isclose(a: float | None, b: float, rel: float = 1e-9) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=rel)
