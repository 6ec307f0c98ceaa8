"""The default measurer of verification repeats: the study's ServerEvaluator on held-out data.

The held-out TPS is measured exactly as the tuned one was (same number of
prompts, output length and warm-up requests, from the study's recipe), on
prompts the study never saw; the PPL on held-out records. Using the same
ServerEvaluator as the study means the same server start, warm-up bridge,
PPL-first ordering and teardown.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from evaluators import PplSettings, TpsSettings, WarmupSettings
from sweeper.errors import UserInputError
from sweeper.measure import EvalSettings
from sweeper.manifest import Manifest
from sweeper.study import StudyRecipe, base_manifest_of

logger = logging.getLogger(__name__)


class HeldOutDataError(UserInputError):
    """The held-out data is missing, or is the data the study tuned on."""


def heldout_sources(
    recipe: StudyRecipe, *, prompts: str | None = None, ppl_data: str | None = None
) -> tuple[str, str]:
    """The held-out prompt set and PPL records: given, else recorded, else the demo's."""
    from sweeper.demo import demo_paths

    demo = demo_paths()
    prompts = prompts or recipe.heldout_prompts
    ppl_data = ppl_data or recipe.heldout_ppl_data
    if recipe.tunes_on_demo_data:
        prompts = prompts or str(demo.prompts_heldout)
        ppl_data = ppl_data or str(demo.ppl_heldout)
    missing = [
        option for option, value in (("--prompts", prompts), ("--ppl-data", ppl_data)) if not value
    ]
    if missing:
        raise HeldOutDataError(
            "the study tuned on its own data and records no held-out set: give the held-out "
            f"data with {' and '.join(missing)} (prompts and PPL records the study did not tune on)"
        )
    tuning = {
        "prompts": recipe.prompts or str(demo.prompts_tuning),
        "ppl-data": recipe.ppl_data or str(demo.ppl_tuning),
    }
    for option, value in (("prompts", prompts), ("ppl-data", ppl_data)):
        if _same_source(value, tuning[option]):
            raise HeldOutDataError(
                f"the held-out {option} {value} is the set the study tuned on: verification "
                "needs data the study never saw"
            )
    return str(prompts), str(ppl_data)


def _same_source(a: str, b: str) -> bool:
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    return a == b


def heldout_settings(recipe: StudyRecipe, prompts: str, ppl_data: str) -> EvalSettings:
    defaults = TpsSettings()
    if recipe.num_prompts is None or recipe.output_len is None:
        logger.warning(
            "the study does not record its TPS settings: measuring with %d prompts of %d "
            "tokens; a held-out TPS measured differently may not match the tuned one",
            recipe.num_prompts or defaults.num_prompts,
            recipe.output_len or defaults.output_len,
        )
    return EvalSettings(
        prompts=prompts,
        ppl_data=ppl_data,
        tps=TpsSettings(
            num_prompts=recipe.num_prompts or defaults.num_prompts,
            output_len=recipe.output_len or defaults.output_len,
            warmup_requests=(
                defaults.warmup_requests if recipe.warmup_requests is None else recipe.warmup_requests
            ),
        ),
        ppl=PplSettings(max_records=recipe.ppl_records or None),
        warmup=(
            None if recipe.warmup_prompts is None else WarmupSettings(num_prompts=recipe.warmup_prompts)
        ),
        overrides=dict(recipe.overrides),
    )


def heldout_evaluator(
    recipe: StudyRecipe,
    *,
    base_manifest: Manifest | None = None,
    prompts: str | None = None,
    ppl_data: str | None = None,
    run_dir: str | Path,
) -> tuple[Any, dict[str, Any]]:
    """A ServerEvaluator on held-out data, and what to store about that data."""
    from sweeper.measure import ServerEvaluator

    manifest = base_manifest_of(recipe, base_manifest)
    prompts, ppl_data = heldout_sources(recipe, prompts=prompts, ppl_data=ppl_data)
    settings = heldout_settings(recipe, prompts, ppl_data)
    # the data is loaded and checked here, before any server time is spent
    first = ServerEvaluator(manifest, settings, run_dir=run_dir)
    evaluator = _PerCandidate(first, Path(run_dir))
    tps = settings.tps
    info = {
        "prompts": prompts,
        "ppl_data": ppl_data,
        "num_prompts": tps.num_prompts if tps else None,
        "output_len": tps.output_len if tps else None,
        "warmup_requests": tps.warmup_requests if tps else None,
        "base_manifest": str(manifest.source) if manifest.source else manifest.name,
        "run_dir": str(Path(run_dir).resolve()),
    }
    return evaluator, info


class _PerCandidate:
    """A ServerEvaluator per candidate, so that each keeps its servers' logs apart:
    ``<run_dir>/trial-<candidate>/trial-<repeat>/server.log``. The data is loaded once."""

    def __init__(self, template: Any, run_dir: Path) -> None:
        self.template = template
        self.run_dir = run_dir

    def __call__(self, params: Any, context: Any) -> Any:
        from sweeper.measure import ServerEvaluator

        number = getattr(context, "trial_number", 0)
        evaluator = ServerEvaluator(
            self.template.base_manifest,
            self.template.settings,
            run_dir=self.run_dir / f"trial-{number:04d}",
            data=self.template.data,
        )
        return evaluator(params, context)
