"""One ``sweeper run`` carried out: ``prepare`` checks, then ``execute`` runs the study and verifies.

``prepare`` loads the manifest and the search space, checks all the data
(tuning and held-out), reads the stored study once (a resumed study keeps
its gate, its TPS connection and must keep its sizes and data) and builds
the evaluator, before any server starts. ``execute`` runs the study with the
``PreparedRun``'s ``StudyOptions`` and, with ``--verify-top``, verifies its answer.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from search_spaces import SearchSpace, load_preset, load_space, preset_names
from sweeper.demo import demo_paths
from sweeper.errors import ManifestError, UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import EvalData, EvalSettings, ServerEvaluator, load_eval_data
from sweeper.serving import (
    DEFAULT_HOST,
    DEFAULT_WARM_STARTS,
    CompileCache,
    WarmStarts,
    check_serve_env,
    port_is_free,
    server_venv,
)
from sweeper.study import (
    PplGate,
    StoredStudy,
    StudyOptions,
    StudyRecipe,
    StudyResult,
    TrialEvent,
    default_space_for,
    model_text,
    parse_duration,
    plan_from_manifest,
    read_stored_study,
    recipe_changes,
    run_study,
    save_recipe,
)
from sweeper.sweep._gpus import worker_slot
from sweeper.sweep._plan import DEMO_PRESET, RunPlan
from sweeper.sweep._run_data import demo_data, demo_models, eval_settings, run_data

logger = logging.getLogger(__name__)


def gate_settings(
    plan: RunPlan, stored: PplGate | None, rerun_default: int | None, study_name: str
) -> tuple[float | None, int | None]:
    """The study's (confidence, re-run records): a resumed study keeps the ones it stored.

    For a new study: the level given (``--ppl-confidence``) or
    ``plan.default_confidence``, and the re-run size given or
    ``rerun_default`` (the records verify scores on the held-out set). For a
    study that stored its gate: its own, and a level or size given that
    differs from it is a UserInputError (its trials were judged that way).
    """
    given = plan.ppl_confidence is not None
    level = plan.given_confidence()
    if stored is not None:
        where = f"study {study_name!r} was started with the gate {stored.describe()}"
        how = "resume it without the option (it keeps its own), or start another study with --study NAME"
        if given and level != stored.confidence:
            text = "none" if level is None else f"{level:g}"
            raise UserInputError(f"--ppl-confidence {text}: {where}: {how}")
        if plan.ppl_rerun_records is not None and plan.ppl_rerun_records != stored.rerun_records:
            raise UserInputError(f"--ppl-rerun-records {plan.ppl_rerun_records}: {where}: {how}")
        return stored.confidence, stored.rerun_records
    if not given:
        level = plan.default_confidence
    if level is None:
        if plan.ppl_rerun_records is not None:
            raise UserInputError(
                "--ppl-rerun-records: only a confidence gate uses it; give --ppl-confidence "
                "LEVEL too (the point estimate is judged as measured)"
            )
        return None, None
    return level, plan.ppl_rerun_records or rerun_default


def stored_gate(stored: StoredStudy | None) -> PplGate | None:
    """The gate a study stored (None: no such study, or none stored yet)."""
    return None if stored is None else PplGate.from_study_attrs(stored.attrs)


def load_run_space(spec: str) -> SearchSpace:
    """A preset name or a search-space file."""
    if spec in preset_names():
        return load_preset(spec)
    if os.path.exists(spec):
        return load_space(spec)
    raise UserInputError(f"search space {spec!r}: neither a preset ({', '.join(preset_names())}) nor a file")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreparedRun:
    plan: RunPlan
    manifest: Manifest
    space: SearchSpace
    study_name: str
    evaluator: ServerEvaluator
    recipe: StudyRecipe
    trials_done: int = 0  # the study's trials that count toward its budget, before this run
    # the gate on the records' uncertainty (gate_settings): None is the point estimate
    ppl_confidence: float | None = None
    ppl_rerun_records: int | None = None

    @property
    def gate(self) -> PplGate:
        return PplGate(
            cap=self.plan.ppl_cap,
            cap_rel=self.plan.ppl_cap_rel,
            confidence=self.ppl_confidence,
            rerun_records=self.ppl_rerun_records,
        )

    @property
    def options(self) -> StudyOptions:
        """What ``run_study`` takes: the plan's settings, its gate and its confirmation races
        (no gate when no cap is given: a resumed study keeps its own)."""
        plan = self.plan
        return StudyOptions(
            study_name=self.study_name,
            storage=plan.storage,
            n_trials=plan.trial_budget,
            timeout_s=parse_duration(plan.timeout),
            trial_timeout_s=parse_duration(plan.trial_timeout),
            gate=None if plan.ppl_cap is None and plan.ppl_cap_rel is None else self.gate,
            mode=plan.mode,
            sampler=plan.sampler,
            seed=plan.seed,
            enqueue=tuple(plan.enqueued_configs()),
            max_consecutive_failures=plan.max_consecutive_failures,
            reuse_quality=plan.reuse_quality,
            confirm=plan.confirm_settings(),
            enqueue_base=True,
        )


def prepare(plan: RunPlan) -> PreparedRun:
    """Check manifest, space and all data (tuning and held-out), build the evaluator.

    No server starts and nothing is written to the study; a ``--server-venv``
    is created (or reused) last, once everything else checked out.
    """
    manifest_path = plan.manifest or str(demo_paths().manifest)
    manifest = Manifest.load(manifest_path)
    check_serve_env(manifest)  # its values as 'sweeper serve' reads them (its folders too), before any server starts
    if plan.server_python is not None:
        try:
            manifest = manifest.with_server_python(plan.server_python)
        except ManifestError as exc:
            raise UserInputError(f"--server-python {plan.server_python}: {exc.problem}") from None
    space = _run_space(plan, manifest, manifest_path)
    data = run_data(plan, manifest_path)
    if plan.keep_port:
        _check_port_free(manifest, manifest_path)
    study_name = plan.resolved_study_name(manifest, space)
    stored = read_stored_study(plan.storage, study_name)  # the one read of an existing study
    run_dir = Path(plan.run_dir) / study_name
    settings = _with_stored_connection(eval_settings(plan, run_dir, data, manifest), stored, study_name)
    tuning = load_eval_data(manifest, settings)  # DataError before any server time is spent
    recipe = StudyRecipe.from_eval_settings(
        manifest_path,
        settings,
        heldout_prompts=data.heldout_prompts,
        heldout_ppl_data=data.heldout_ppl_data,
        server_python=manifest.server_python,
    )
    heldout = _check_heldout(manifest, recipe)
    counts = _data_counts(tuning, heldout)
    assert settings.tps is not None  # eval_settings always measures TPS
    if counts["prompts"] < settings.tps.num_prompts:
        logger.warning(
            "the tuning prompt set has %d prompts, fewer than the %d asked for (--num-prompts): "
            "each TPS measurement uses all %d",
            counts["prompts"],
            settings.tps.num_prompts,
            counts["prompts"],
        )
    _check_resume(stored, study_name, recipe)
    scored = counts["heldout_ppl_records"]  # what verify scores: the held-out set, --ppl-records at most
    if scored and plan.sizes.ppl_records is not None:
        scored = min(scored, plan.sizes.ppl_records)
    confidence, rerun_records = gate_settings(plan, stored_gate(stored), scored or None, study_name)
    if plan.server_venv:
        venv = server_venv(manifest.dependencies, cwd=manifest.folder)
        manifest = manifest.with_server_python(venv.python)
    recipe = dataclasses.replace(recipe, data_counts=counts, server_python=manifest.server_python)
    device = worker_slot(plan.gpus, manifest.env)  # GPU memory wait, CUDA_VISIBLE_DEVICES
    evaluator = ServerEvaluator(
        manifest,
        settings,
        run_dir=run_dir,
        data=tuning,
        device=device,
        warm_starts=WarmStarts.OFF if plan.fresh_servers else DEFAULT_WARM_STARTS,
        compile_cache=CompileCache(fresh=plan.fresh_cache),
    )
    return PreparedRun(
        plan=plan,
        manifest=manifest,
        space=space,
        study_name=study_name,
        evaluator=evaluator,
        recipe=recipe,
        trials_done=0 if stored is None else stored.trials_done,
        ppl_confidence=confidence,
        ppl_rerun_records=rerun_records,
    )


def _run_space(plan: RunPlan, manifest: Manifest, manifest_path: str) -> SearchSpace:
    """The space searched: the demo's preset bound to its manifest, or the one given or chosen
    for the manifest (whose own values of the searched knobs become the first trial); every
    ``--enqueue`` config checked against it."""
    if plan.manifest is None:
        space = load_run_space(plan.space or DEMO_PRESET).bind(manifest.env)
    else:
        spec = plan.space or default_space_for(manifest, local_models=demo_models())
        if spec is None:
            raise UserInputError(
                f"{manifest_path}: no preset fits {model_text(manifest)}; pass --space "
                f"(a preset: {', '.join(preset_names())}, or a YAML/TOML file)"
            )
        space = plan_from_manifest(manifest, load_run_space(spec)).space
    for index, config in enumerate(plan.enqueued_configs()):
        space.check_params(config, f"--enqueue #{index + 1}")
    return space


def _data_counts(tuning: EvalData, heldout: EvalData) -> dict[str, int]:
    """The sizes of the tuning and held-out sets, as the study recipe records them."""
    return {
        "prompts": len(tuning.prompts) if tuning.prompts is not None else 0,
        "ppl_records": len(tuning.ppl_records) if tuning.ppl_records is not None else 0,
        "heldout_prompts": len(heldout.prompts) if heldout.prompts is not None else 0,
        "heldout_ppl_records": len(heldout.ppl_records) if heldout.ppl_records is not None else 0,
    }


def _check_heldout(manifest: Manifest, recipe: StudyRecipe) -> EvalData:
    """Load the held-out data as verify will (and fail now, not after the night)."""
    from sweeper.answer import heldout_data, heldout_settings

    return load_eval_data(manifest, heldout_settings(recipe, heldout_data(recipe, defaults=demo_data())))


def _with_stored_connection(settings: EvalSettings, study: StoredStudy | None, study_name: str) -> EvalSettings:
    """A resumed study measures TPS with the connection protocol it was measured with."""
    stored = None if study is None else study.recipe
    if stored is None or settings.tps is None or stored.connection == settings.tps.connection:
        return settings
    logger.info(
        "study %s measured TPS with the %r connection protocol: its new trials do too",
        study_name,
        stored.connection,
    )
    return dataclasses.replace(
        settings,
        tps=dataclasses.replace(settings.tps, connection=stored.connection),
        screen=None if settings.screen is None else dataclasses.replace(settings.screen, connection=stored.connection),
    )


def _check_resume(study: StoredStudy | None, study_name: str, recipe: StudyRecipe) -> None:
    """A study resumed with other sizes or data would mix numbers measured two ways: refuse."""
    stored = None if study is None else study.recipe
    if stored is None:
        return
    changes = recipe_changes(stored, recipe)
    if changes:
        listed = "; ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in changes.items())
        raise UserInputError(
            f"study {study_name!r} was measured with other settings than this run's ({listed}): "
            "its trials would not be comparable; run it with the options it was started with, "
            "or start another study with --study NAME"
        )


def _check_port_free(manifest: Manifest, label: str) -> None:
    host = manifest.env.get("HOST") or DEFAULT_HOST
    if not port_is_free(manifest.port, host):
        raise UserInputError(
            f"--keep-port: port {manifest.port} of {label} is already in use on {host}; stop "
            "what listens there, or run without --keep-port so that each server gets a free port"
        )


def execute(prepared: PreparedRun, *, progress: Callable[[TrialEvent], None] | None = None) -> StudyResult:
    plan = prepared.plan
    saved: list[bool] = []

    def progress_and_recipe(event: TrialEvent) -> None:
        if not saved:  # the study exists once its first trial starts: record how it measures
            save_recipe(plan.storage, prepared.study_name, prepared.recipe)
            saved.append(True)
        if progress is not None:
            progress(event)

    sizes = plan.sizes
    logger.info(
        "study %r: space %s, %s trials, %d prompts x %d tokens, storage %s",
        prepared.study_name,
        prepared.space.name,
        plan.trial_budget or "unlimited",
        sizes.num_prompts,
        sizes.output_len,
        plan.storage,
    )
    options = dataclasses.replace(prepared.options, progress=progress_and_recipe)
    result = run_study(prepared.space, prepared.evaluator, options)
    if not saved:
        save_recipe(plan.storage, prepared.study_name, prepared.recipe)
    verify_answer(prepared)
    return result


def verify_answer(prepared: PreparedRun) -> None:
    """``--verify-top N``: verify the N best feasible trials on held-out data (nothing for 0)."""
    plan = prepared.plan
    if not plan.verify_top:
        return
    from sweeper.answer import VerifySettings, verify_study

    settings = VerifySettings(
        top=plan.verify_top,
        base_manifest=prepared.manifest,
        recipe=prepared.recipe,
        data_defaults=demo_data(),
        run_dir=Path(plan.run_dir) / prepared.study_name / "verify",
    )
    verify_study(settings, storage=plan.storage, study_name=prepared.study_name)
