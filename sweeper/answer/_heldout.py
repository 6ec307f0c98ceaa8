"""The default measurer of verification repeats: the study's ServerEvaluator on held-out data.

The held-out TPS is measured exactly as the tuned one was (same number of
prompts, output length and warm-up requests, from the study's recipe), on
prompts the study never saw; the PPL on held-out records. Using the same
ServerEvaluator as the study means the same server start, warm-up bridge,
PPL-first ordering and teardown.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from evaluators import PplSettings, TpsSettings, WarmupSettings
from sweeper.errors import UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import DataSplit, EvalSettings, ServerEvaluator
from sweeper.study import DataDefaults, StudyRecipe, base_manifest_of

logger = logging.getLogger(__name__)


class HeldOutDataError(UserInputError):
    """The held-out data is missing, or is the data the study tuned on."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeldOutData:
    """Where the held-out prompts and PPL records come from.

    A kind with a ``*_split`` is the held-out part of that file, split off
    exactly as the study split its tuning part (same fraction, same seed);
    without one, the file is held-out data as a whole.
    """

    prompts: str
    ppl_data: str
    prompts_split: DataSplit | None = None
    ppl_split: DataSplit | None = None


def heldout_data(
    recipe: StudyRecipe,
    *,
    prompts: str | None = None,
    ppl_data: str | None = None,
    defaults: DataDefaults | None = None,
) -> HeldOutData:
    """The held-out prompt set and PPL records: given, else recorded (a file, or the part
    split off the tuning set), else the ``defaults``' held-out sets when the study tuned on
    their tuning sets (``defaults`` also stand for tuning sets the recipe does not record)."""
    default_tuning: dict[str, str | None] = {"prompts": None, "ppl_data": None}
    default_heldout: dict[str, str | None] = {"prompts": None, "ppl_data": None}
    if defaults is not None:
        default_tuning = {"prompts": str(defaults.prompts), "ppl_data": str(defaults.ppl_data)}
        default_heldout = {"prompts": str(defaults.heldout_prompts), "ppl_data": str(defaults.heldout_ppl_data)}
    tuning = {
        "prompts": recipe.prompts or default_tuning["prompts"],
        "ppl_data": recipe.ppl_data or default_tuning["ppl_data"],
    }
    given = {"prompts": prompts, "ppl_data": ppl_data}
    recorded = {"prompts": recipe.heldout_prompts, "ppl_data": recipe.heldout_ppl_data}
    sources: dict[str, str | None] = {}
    splits: dict[str, DataSplit | None] = {}
    for kind in ("prompts", "ppl_data"):
        split = recipe.split_of(kind)
        splits[kind] = None
        if given[kind]:
            sources[kind] = given[kind]
        elif recorded[kind]:
            sources[kind] = recorded[kind]
        elif split is not None:
            sources[kind] = tuning[kind]
            splits[kind] = DataSplit(heldout_fraction=split[0], seed=split[1], part="heldout")
        elif recipe.tunes_on(defaults):
            sources[kind] = default_heldout[kind]
        else:
            sources[kind] = None
    missing = [f"--{kind.replace('_', '-')}" for kind, value in sources.items() if not value]
    if missing:
        raise HeldOutDataError(
            "the study tuned on its own data and records no held-out set: give the held-out "
            f"data with {' and '.join(missing)} (prompts and PPL records the study did not tune on)"
        )
    for kind, value in sources.items():
        tuned = tuning[kind]
        if splits[kind] is None and tuned is not None and _same_source(str(value), tuned):
            raise HeldOutDataError(
                f"the held-out {kind.replace('_', '-')} {value} is the set the study tuned on: "
                "verification needs data the study never saw"
            )
    return HeldOutData(
        prompts=str(sources["prompts"]),
        ppl_data=str(sources["ppl_data"]),
        prompts_split=splits["prompts"],
        ppl_split=splits["ppl_data"],
    )


def heldout_sources(
    recipe: StudyRecipe,
    *,
    prompts: str | None = None,
    ppl_data: str | None = None,
    defaults: DataDefaults | None = None,
) -> tuple[str, str]:
    """The files of the held-out prompt set and PPL records (see ``heldout_data``)."""
    data = heldout_data(recipe, prompts=prompts, ppl_data=ppl_data, defaults=defaults)
    return data.prompts, data.ppl_data


def _same_source(a: str, b: str) -> bool:
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    return a == b


def heldout_settings(recipe: StudyRecipe, prompts: str | HeldOutData, ppl_data: str | None = None) -> EvalSettings:
    """The study's measuring settings (from its recipe) on the held-out data."""
    if isinstance(prompts, HeldOutData):
        data = prompts
    else:
        data = HeldOutData(prompts=prompts, ppl_data=str(ppl_data))
    defaults = TpsSettings()
    if recipe.num_prompts is None or recipe.output_len is None:
        logger.warning(
            "the study does not record its TPS settings: measuring with %d prompts of %d "
            "tokens; a held-out TPS measured differently may not match the tuned one",
            recipe.num_prompts or defaults.num_prompts,
            recipe.output_len or defaults.output_len,
        )
    return EvalSettings(
        prompts=data.prompts,
        ppl_data=data.ppl_data,
        prompts_split=data.prompts_split,
        ppl_split=data.ppl_split,
        keep_port=recipe.keep_port,
        ready_timeout_s=recipe.ready_timeout_s or EvalSettings.ready_timeout_s,
        tps=TpsSettings(
            connection=recipe.connection,  # as the study measured it
            num_prompts=recipe.num_prompts or defaults.num_prompts,
            output_len=recipe.output_len or defaults.output_len,
            warmup_requests=(defaults.warmup_requests if recipe.warmup_requests is None else recipe.warmup_requests),
        ),
        ppl=PplSettings(max_records=recipe.ppl_records or None),
        warmup=(None if recipe.warmup_prompts is None else WarmupSettings(num_prompts=recipe.warmup_prompts)),
        overrides=dict(recipe.overrides),
    )


def heldout_evaluator(
    recipe: StudyRecipe,
    *,
    base_manifest: Manifest | None = None,
    prompts: str | None = None,
    ppl_data: str | None = None,
    defaults: DataDefaults | None = None,
    run_dir: str | Path,
) -> tuple[Any, dict[str, Any]]:
    """A ServerEvaluator on held-out data (``heldout_data``), and what to store about that data."""
    manifest = base_manifest_of(recipe, base_manifest)
    if recipe.server_python and manifest.server_python is None:
        manifest = manifest.with_server_python(recipe.server_python)
    data = heldout_data(recipe, prompts=prompts, ppl_data=ppl_data, defaults=defaults)
    settings = heldout_settings(recipe, data)
    # the data is loaded and checked here, before any server time is spent
    first = ServerEvaluator(manifest, settings, run_dir=run_dir)
    evaluator = _PerCandidate(first, Path(run_dir))
    tps = settings.tps
    info = {
        "prompts": data.prompts,
        "ppl_data": data.ppl_data,
        "prompts_split": _split_info(data.prompts_split),
        "ppl_split": _split_info(data.ppl_split),
        "heldout_prompts": len(first.data.prompts) if first.data.prompts is not None else None,
        "heldout_ppl_records": (len(first.data.ppl_records) if first.data.ppl_records is not None else None),
        "num_prompts": tps.num_prompts if tps else None,
        "output_len": tps.output_len if tps else None,
        "warmup_requests": tps.warmup_requests if tps else None,
        "base_manifest": str(manifest.source) if manifest.source else manifest.name,
        "run_dir": str(Path(run_dir).resolve()),
    }
    return evaluator, info


def _split_info(split: DataSplit | None) -> dict[str, Any] | None:
    if split is None:
        return None
    return {"heldout_fraction": split.heldout_fraction, "seed": split.seed, "part": split.part}


class _PerCandidate:
    """A ServerEvaluator per candidate, so that each keeps its servers' logs apart:
    ``<run_dir>/trial-<candidate>/trial-<repeat>/server.log``, and those of the base
    measured beside it (the control) in ``<run_dir>/trial-<candidate>-base/``. The data
    is loaded once."""

    def __init__(self, template: Any, run_dir: Path) -> None:
        self.template = template
        self.run_dir = run_dir

    def __call__(self, params: Any, context: Any) -> Any:
        number = getattr(context, "trial_number", 0)
        folder = f"trial-{number:04d}" + ("-base" if getattr(context, "subject", "") == "base" else "")
        evaluator = ServerEvaluator(
            self.template.base_manifest,
            self.template.settings,
            run_dir=self.run_dir / folder,
            data=self.template.data,
        )
        return evaluator(params, context)
