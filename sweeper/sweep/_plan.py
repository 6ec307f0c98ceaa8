"""``sweeper run``: a base manifest + a search space + real servers -> a study.

``RunPlan`` holds every choice of one run, with the demo's defaults: the
``tiny-cpu`` preset on the bundled manifest, a SQLite file in the current
folder, the baseline measured first and a cap 5 % above its PPL. ``execute``
checks everything that can be checked before a server starts (manifest,
space, data), builds the server evaluator and runs the study.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from evaluators import PplSettings, TpsSettings
from search_spaces import SearchSpace, load_preset, load_space, preset_names
from sweeper.demo import demo_paths
from sweeper.errors import UserInputError
from sweeper.study import default_space_for, plan_from_manifest
from sweeper.study import StudyRecipe, save_recipe
from sweeper.measure import EvalSettings
from sweeper.manifest import Manifest
from sweeper.study import TrialEvent
from sweeper.measure import ServerEvaluator
from sweeper.study import StudyResult, run_study
from sweeper.sweep._workers import parse_gpus, worker_slot

logger = logging.getLogger(__name__)

DEMO_PRESET = "tiny-cpu"
DEMO_STUDY = "tiny-cpu-demo"
DEMO_STORAGE = "sqlite:///sweeper-study.db"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything one ``sweeper run`` decides; the defaults run the demo."""

    manifest: str | None = None  # None: the bundled demo manifest
    space: str | None = None  # a preset name or a YAML/TOML file; None: chosen for the manifest
    study_name: str | None = None
    storage: str = DEMO_STORAGE
    n_trials: int | None = 8
    timeout: str | float | None = None
    mode: str = "tps"
    sampler: str | None = None
    seed: int | None = 0
    ppl_cap: float | None = None
    ppl_cap_rel: float | None = 1.05
    reuse_quality: bool = True
    max_consecutive_failures: int = 3
    prompts: str | None = None  # None: the demo's tuning prompts
    ppl_data: str | None = None  # None: the demo's tuning PPL records
    num_prompts: int = 8
    output_len: int = 128
    warmup_requests: int = 1
    warmup_prompts: int | None = None  # None: the manifest's WARMUP_* or the default 64
    ppl_max_records: int | None = None
    run_dir: str = "sweeper-runs"
    ready_timeout_s: float = 900.0
    verify_top: int = 0
    enqueue: tuple[str, ...] = ()  # "name=value,name=value" configs tried first
    # --gpus "0,1,2,3": one worker per GPU (group of TENSOR_PARALLEL_SIZE) on this host (_workers)
    gpus: str | None = None

    def enqueued_configs(self) -> list[dict[str, str]]:
        """``--enqueue`` texts as params (values are typed by the search space later)."""
        configs = []
        for text in self.enqueue:
            config: dict[str, str] = {}
            for item in filter(None, (part.strip() for part in text.split(","))):
                name, sep, value = item.partition("=")
                if not sep or not name.strip():
                    raise UserInputError(f"--enqueue {text!r}: expected name=value[,name=value...]")
                config[name.strip()] = value.strip()
            if not config:
                raise UserInputError(f"--enqueue {text!r}: no parameters given")
            configs.append(config)
        return configs

    def __post_init__(self) -> None:
        if self.ppl_cap is not None and self.ppl_cap_rel is not None:
            object.__setattr__(self, "ppl_cap_rel", None)  # an absolute cap wins
        for name in ("num_prompts", "output_len"):
            if getattr(self, name) < 1:
                raise UserInputError(f"--{name.replace('_', '-')} must be at least 1")
        if self.ppl_cap is not None and not self.ppl_cap > 0:
            raise UserInputError(f"--ppl-cap must be positive, not {self.ppl_cap}")
        if self.ppl_cap_rel is not None and not self.ppl_cap_rel >= 1.0:
            raise UserInputError(f"--ppl-cap-rel must be at least 1.0, not {self.ppl_cap_rel}")
        if self.gpus is not None:  # --gpus: ids only here; the groups need the manifest (prepare)
            parse_gpus(self.gpus)

    def resolved_study_name(self, manifest: Manifest, space: SearchSpace) -> str:
        if self.study_name:
            return self.study_name
        if self.manifest is None and self.space in (None, DEMO_PRESET):
            return DEMO_STUDY
        return f"{manifest.name}-{space.name}"


def load_run_space(spec: str) -> SearchSpace:
    """A preset name or a search-space file."""
    if spec in preset_names():
        return load_preset(spec)
    if os.path.exists(spec):
        return load_space(spec)
    raise UserInputError(
        f"search space {spec!r}: neither a preset ({', '.join(preset_names())}) nor a file"
    )


def eval_settings(plan: RunPlan, run_dir: Path) -> EvalSettings:
    demo = demo_paths()
    from evaluators import WarmupSettings

    warmup = None
    if plan.warmup_prompts is not None:
        warmup = WarmupSettings(num_prompts=plan.warmup_prompts)
    return EvalSettings(
        prompts=plan.prompts or str(demo.prompts_tuning),
        ppl_data=plan.ppl_data or str(demo.ppl_tuning),
        tps=TpsSettings(
            num_prompts=plan.num_prompts,
            output_len=plan.output_len,
            warmup_requests=plan.warmup_requests,
        ),
        ppl=PplSettings(max_records=plan.ppl_max_records),
        warmup=warmup,
        ready_timeout_s=plan.ready_timeout_s,
        log_path=run_dir / "eval.log",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreparedRun:
    plan: RunPlan
    manifest: Manifest
    space: SearchSpace
    study_name: str
    evaluator: ServerEvaluator
    recipe: StudyRecipe


def prepare(plan: RunPlan) -> PreparedRun:
    """Check manifest, space and data, and build the evaluator; no server starts."""
    manifest_path = plan.manifest or str(demo_paths().manifest)
    manifest = Manifest.load(manifest_path)
    if plan.manifest is None:
        space = load_run_space(plan.space or DEMO_PRESET).bind(manifest.env)
    else:  # the manifest's own values of the searched knobs become the first trial
        spec = plan.space or default_space_for(manifest)
        if spec is None:
            raise UserInputError(
                f"{manifest_path}: no preset fits this manifest's model; pass --space "
                f"(a preset: {', '.join(preset_names())}, or a YAML/TOML file)"
            )
        space = plan_from_manifest(manifest, load_run_space(spec)).space
    study_name = plan.resolved_study_name(manifest, space)
    run_dir = Path(plan.run_dir) / study_name
    settings = eval_settings(plan, run_dir)
    for index, config in enumerate(plan.enqueued_configs()):
        space.check_params(config, f"--enqueue #{index + 1}")
    device = worker_slot(plan.gpus, manifest.env)  # GPU memory wait, CUDA_VISIBLE_DEVICES
    evaluator = ServerEvaluator(manifest, settings, run_dir=run_dir, device=device)
    recipe = StudyRecipe.from_eval_settings(manifest_path, settings)
    return PreparedRun(
        plan=plan,
        manifest=manifest,
        space=space,
        study_name=study_name,
        evaluator=evaluator,
        recipe=recipe,
    )


def execute(
    prepared: PreparedRun, *, progress: Callable[[TrialEvent], None] | None = None
) -> StudyResult:
    plan = prepared.plan
    saved: list[bool] = []

    def progress_and_recipe(event: TrialEvent) -> None:
        if not saved:  # the study exists once its first trial starts: record how it measures
            save_recipe(plan.storage, prepared.study_name, prepared.recipe)
            saved.append(True)
        if progress is not None:
            progress(event)

    logger.info(
        "study %r: space %s, %s trials, storage %s",
        prepared.study_name,
        prepared.space.name,
        plan.n_trials or "unlimited",
        plan.storage,
    )
    result = run_study(
        prepared.space,
        prepared.evaluator,
        study_name=prepared.study_name,
        storage=plan.storage,
        n_trials=plan.n_trials,
        timeout=plan.timeout,
        ppl_cap=plan.ppl_cap,
        ppl_cap_rel=plan.ppl_cap_rel,
        sampler=plan.sampler,
        seed=plan.seed,
        mode=plan.mode,
        reuse_quality=plan.reuse_quality,
        max_consecutive_failures=plan.max_consecutive_failures,
        progress=progress_and_recipe,
        enqueue=plan.enqueued_configs(),
    )
    if not saved:
        save_recipe(plan.storage, prepared.study_name, prepared.recipe)
    if plan.verify_top:
        from sweeper.answer import verify_study

        verify_study(
            storage=plan.storage,
            study_name=prepared.study_name,
            top=plan.verify_top,
            base_manifest=prepared.manifest,
            recipe=prepared.recipe,
            run_dir=Path(plan.run_dir) / prepared.study_name / "verify",
        )
    return result
