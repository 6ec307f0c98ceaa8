"""``sweeper run``: a base manifest + a search space + real servers -> a study.

``RunPlan`` holds every choice of one run and checks each value as it is
made (a bad option is a ``UserInputError`` naming it, before anything is
shown or written). Its sizes depend on the run: the bundled demo keeps its
small preset (``DEMO_SIZES``: 8 prompts x 128 tokens, 1 warm-up request),
any other manifest gets the challenge's (``CHALLENGE_SIZES``: 128 x 512, 4
warm-up requests, the 64-prompt warm-up bridge). ``prepare`` checks the
manifest, the space and all the data (tuning and held-out) before a server
starts; ``execute`` runs the study and, when asked, verifies its answer on
the held-out data the study recipe records.

A run on the user's own manifest needs its data (``--prompts``,
``--ppl-data``) and held-out data, given (``--heldout-prompts``,
``--heldout-ppl-data``) or split off the tuning data by a seeded fraction
(``--heldout-fraction``, ``--split-seed``); the demo has bundled sets of both.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

from evaluators import PplSettings, TpsSettings, WarmupSettings
from evaluators.intervals import PRIOR_SPREAD
from search_spaces import SearchSpace, load_preset, load_space, preset_names
from storage import check_url
from sweeper.demo import demo_paths
from sweeper.errors import ManifestError, UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import DataSplit, EvalData, EvalSettings, ServerEvaluator, load_eval_data, warmup_settings_from
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
    DEFAULT_CONFIDENCE,
    MODES,
    SAMPLERS,
    ConfirmSettings,
    ConfirmSettingsError,
    DataDefaults,
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
from sweeper.sweep._gpus import parse_gpus, worker_slot

logger = logging.getLogger(__name__)

DEMO_PRESET = "tiny-cpu"
DEMO_STUDY = "tiny-cpu-demo"
DEMO_STORAGE = "sqlite:///sweeper-study.db"
# the demo's budget: the base, the preset's known configuration and two more, so that its races
# and claim rounds fit in about 15 minutes on 2 cores
DEMO_TRIALS = 4
# the demo's known configuration, tried right after its base: the best K measured on the
# tiny model (docs/tiny-model.md, about 1.27x the base's 1 speculative token), as the
# challenge's preset enqueues the best entry known
DEMO_ENQUEUE = ("sliding_window=32,centroid_top_k=8,num_speculative_tokens=3",)
DEFAULT_TRIALS = 8  # a run's on its own manifest when neither --n-trials nor --timeout is given
# the between-server spread (SD of log TPS) assumed until a study's repeats measure it: the
# same configuration moved 10-20 % between fresh servers on 2 shared CPU cores (docs/measurement.md)
DEFAULT_NOISE = PRIOR_SPREAD
# on the H200, the GPU demo's configuration read 0.132 (SD of log TPS) across 3 fresh servers
# at demo sizes and 0.095 at the challenge's 128 x 512 (docs/gpu.md, 2026-12-01)
GPU_DEMO_NOISE = 0.13
# rounds a confirmation race (and the claim rounds after it) may take; the demo fewer, to stay
# near its 15 minutes on 2 cores
CONFIRM_ROUNDS = 6
DEMO_CONFIRM_ROUNDS = 4
# what --ppl-confidence takes for the point-estimate gate
POINT_GATE_WORDS = ("none", "off", "point")
# the command-line option behind each ConfirmSettings field the plan sets
_CONFIRM_OPTIONS = {"rounds": "--confirm-rounds", "noise": "--noise"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSizes:
    """How much each trial measures. ``warmup_prompts`` None: the manifest's
    ``WARMUP_NUM_PROMPTS`` or the bridge's default (64); ``ppl_records`` None: all."""

    num_prompts: int
    output_len: int
    warmup_requests: int
    warmup_prompts: int | None = None
    ppl_records: int | None = None


DEMO_SIZES = RunSizes(num_prompts=8, output_len=128, warmup_requests=1)
CHALLENGE_SIZES = RunSizes(
    num_prompts=TpsSettings.num_prompts,
    output_len=TpsSettings.output_len,
    warmup_requests=TpsSettings.warmup_requests,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything one ``sweeper run`` decides; the defaults run the demo.

    A size left None takes the run's preset (``sizes``): the demo's with no
    ``manifest``, else the challenge's. ``n_trials`` None: 8, or no limit when
    a ``timeout`` is given on a non-demo run (``trial_budget``).
    """

    manifest: str | None = None  # None: the bundled demo manifest
    space: str | None = None  # a preset name or a YAML/TOML file; None: chosen for the manifest
    study_name: str | None = None
    storage: str = DEMO_STORAGE
    n_trials: int | None = None
    timeout: str | float | None = None
    mode: str = "tps"
    sampler: str | None = None
    seed: int | None = 0
    ppl_cap: float | None = None
    ppl_cap_rel: float | None = 1.05
    # the gate on the records' uncertainty (--ppl-confidence): a level such as 0.9 or "90%",
    # "none" for the point estimate; None (not given) takes ``default_confidence`` for a new
    # study and the stored level on resume. ``ppl_rerun_records`` None: the held-out set's size
    ppl_confidence: float | str | None = None
    ppl_rerun_records: int | None = None
    reuse_quality: bool = True
    max_consecutive_failures: int = 3
    # confirmation races (sweeper.study._race_decision): rounds per race, and the between-server
    # spread (SD of log TPS) assumed until repeats measure it
    confirm_rounds: int | None = None  # None: DEMO_CONFIRM_ROUNDS on the demo, else CONFIRM_ROUNDS
    noise: float | None = None  # None: DEFAULT_NOISE
    # multi-fidelity: "16x128" runs a short TPS screen first; the full run only when it could win
    screen: str | None = None
    # data: None is the demo's bundled sets on the demo, and missing on any other manifest
    prompts: str | None = None
    ppl_data: str | None = None
    heldout_prompts: str | None = None
    heldout_ppl_data: str | None = None
    heldout_fraction: float | None = None  # split the held-out sets not given off the tuning sets
    split_seed: int = 0
    # sizes: None takes the run's preset (see ``sizes``)
    num_prompts: int | None = None
    output_len: int | None = None
    warmup_requests: int | None = None
    warmup_prompts: int | None = None
    ppl_max_records: int | None = None
    # servers
    run_dir: str = "sweeper-runs"
    ready_timeout_s: float = 900.0
    server_python: str | None = None
    server_venv: bool = False
    keep_port: bool = False
    fresh_servers: bool = False  # no warm launcher: every server a new process (verify and rerun always are)
    fresh_cache: bool = False  # every server compiles into an empty folder of its own
    verify_top: int = 0
    enqueue: tuple[str, ...] = ()  # "name=value,name=value" configs tried first
    # one trial's wall-clock limit (e.g. "45m"); None: derived from the sizes by the evaluator
    trial_timeout: str | float | None = None
    # --gpus "0,1,2,3": one worker per GPU (group of TENSOR_PARALLEL_SIZE) on this host (_workers)
    gpus: str | None = None

    def __post_init__(self) -> None:
        if self.ppl_cap is not None and self.ppl_cap_rel is not None:
            object.__setattr__(self, "ppl_cap_rel", None)  # an absolute cap wins
        _positive_int("--n-trials", self.n_trials)
        _positive_int("--max-consecutive-failures", self.max_consecutive_failures)
        for option, value in (
            ("--num-prompts", self.num_prompts),
            ("--output-len", self.output_len),
            ("--ppl-records", self.ppl_max_records),
        ):
            _positive_int(option, value)
        for option, value in (
            ("--warmup-requests", self.warmup_requests),
            ("--warmup-prompts", self.warmup_prompts),
            ("--verify-top", self.verify_top),
        ):
            _positive_int(option, value, zero=True)
        for option, value in (("timeout", self.timeout), ("trial-timeout", self.trial_timeout)):
            if value is None:
                continue
            try:
                seconds = parse_duration(value)
            except UserInputError as exc:
                raise UserInputError(f"--{option}: {str(exc).split(': ', 1)[-1]}") from None
            if seconds is not None and not seconds > 0:
                raise UserInputError(f"--{option} must be longer than 0 s, not {value!r}")
        if not _number(self.ready_timeout_s) or not self.ready_timeout_s > 0:
            raise UserInputError(f"--ready-timeout must be a positive number of seconds, not {self.ready_timeout_s!r}")
        if self.ppl_cap is not None and not (_number(self.ppl_cap) and self.ppl_cap > 0):
            raise UserInputError(f"--ppl-cap must be positive, not {self.ppl_cap}")
        if self.ppl_cap_rel is not None and not (_number(self.ppl_cap_rel) and self.ppl_cap_rel >= 1.0):
            raise UserInputError(f"--ppl-cap-rel must be at least 1.0, not {self.ppl_cap_rel}")
        _positive_int("--ppl-rerun-records", self.ppl_rerun_records)
        point_given = self.ppl_confidence is not None and self.given_confidence() is None
        if self.ppl_rerun_records is not None and point_given:
            raise UserInputError(
                "--ppl-rerun-records: only a confidence gate uses it, and --ppl-confidence is none "
                "(the point estimate is judged as measured)"
            )
        if self.mode not in MODES:
            raise UserInputError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise UserInputError(f"--sampler must be one of {', '.join(SAMPLERS)}, not {self.sampler!r}")
        if self.heldout_fraction is not None:
            DataSplit(heldout_fraction=self.heldout_fraction, seed=self.split_seed)  # checks both
            if self.heldout_prompts and self.heldout_ppl_data:
                raise UserInputError(
                    "--heldout-fraction: both held-out sets are given (--heldout-prompts, "
                    "--heldout-ppl-data): there is nothing to split off"
                )
        if self.server_python is not None and self.server_venv:
            raise UserInputError("--server-python and --server-venv: give one of them, not both")
        if self.gpus is not None:  # --gpus: ids only here; the groups need the manifest (prepare)
            parse_gpus(self.gpus)
        check_url(self.storage)  # a URL that is not one, a file that is no database: one line, exit 2
        self.enqueued_configs()
        self.confirm_settings()
        self.screen_sizes()

    def given_confidence(self) -> float | None:
        """``--ppl-confidence`` as a level (None: the point estimate, or not given)."""
        value = self.ppl_confidence
        if value is None:
            return None
        if isinstance(value, str):
            text = value.strip().lower()
            if text in POINT_GATE_WORDS:
                return None
            try:
                level = float(text[:-1]) / 100 if text.endswith("%") else float(text)
            except ValueError:
                level = math.nan
        elif _number(value):
            level = float(value)
        else:
            level = math.nan
        if not 0.5 <= level < 1.0:
            raise UserInputError(
                f"--ppl-confidence must be a level from 0.5 to below 1 (0.9 or 90%), or none for "
                f"the point estimate, not {value!r}"
            )
        return level

    @property
    def default_confidence(self) -> float:
        """A new study's level when none is given: ``DEFAULT_CONFIDENCE``, under an absolute
        cap and a relative one alike (docs/study.md, "The gate")."""
        return DEFAULT_CONFIDENCE

    def screen_sizes(self) -> tuple[int, int] | None:
        """``--screen PROMPTSxTOKENS`` as numbers (None: no screen)."""
        if self.screen is None:
            return None
        parts = str(self.screen).lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise UserInputError(f"--screen: expected PROMPTSxTOKENS such as 16x128, not {self.screen!r}")
        return int(parts[0]), int(parts[1])

    def confirm_settings(self) -> ConfirmSettings:
        try:
            rounds = self.confirm_rounds
            if rounds is None:
                rounds = DEMO_CONFIRM_ROUNDS if self.demo else CONFIRM_ROUNDS
            noise = DEFAULT_NOISE if self.noise is None else self.noise
            return ConfirmSettings(rounds=rounds, noise=noise)
        except ConfirmSettingsError as exc:
            option = _CONFIRM_OPTIONS.get(exc.field, exc.field)
            raise UserInputError(f"{option}: {exc}") from None

    # -- what the plan resolves to ----------------------------------------------------

    @property
    def demo(self) -> bool:
        """Is this the bundled demo (no ``--manifest``)?"""
        return self.manifest is None

    @property
    def sizes(self) -> RunSizes:
        """The sizes given, else the demo's small preset or the challenge's."""
        preset = DEMO_SIZES if self.demo else CHALLENGE_SIZES
        return RunSizes(
            num_prompts=preset.num_prompts if self.num_prompts is None else self.num_prompts,
            output_len=preset.output_len if self.output_len is None else self.output_len,
            warmup_requests=preset.warmup_requests if self.warmup_requests is None else self.warmup_requests,
            warmup_prompts=self.warmup_prompts,
            ppl_records=self.ppl_max_records,
        )

    @property
    def trial_budget(self) -> int | None:
        """``n_trials`` given; else none with a timeout (not on the demo); else the demo's
        ``DEMO_TRIALS`` or a run's ``DEFAULT_TRIALS``."""
        if self.n_trials is not None:
            return self.n_trials
        if self.timeout is not None and not self.demo:
            return None
        return DEMO_TRIALS if self.demo else DEFAULT_TRIALS

    def enqueued_configs(self) -> list[dict[str, str]]:
        """``--enqueue`` texts as params (values are typed by the search space later); the
        demo, given none, tries ``DEMO_ENQUEUE`` first."""
        configs = []
        for text in self.enqueue or (DEMO_ENQUEUE if self.demo else ()):
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

    def resolved_study_name(self, manifest: Manifest, space: SearchSpace) -> str:
        if self.study_name:
            return self.study_name
        if self.manifest is None and self.space in (None, DEMO_PRESET):
            return DEMO_STUDY
        return f"{manifest.name}-{space.name}"


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


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(option: str, value: object, *, zero: bool = False) -> None:
    if value is None:
        return
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative integer" if zero else "a positive integer"
        raise UserInputError(f"{option} must be {kind}, not {value!r}")


def load_run_space(spec: str) -> SearchSpace:
    """A preset name or a search-space file."""
    if spec in preset_names():
        return load_preset(spec)
    if os.path.exists(spec):
        return load_space(spec)
    raise UserInputError(f"search space {spec!r}: neither a preset ({', '.join(preset_names())}) nor a file")


# -- data -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunData:
    """The data sources of a run: tuning sets, and where the held-out sets come from."""

    prompts: str
    ppl_data: str
    heldout_prompts: str | None  # None: split off ``prompts`` by ``split``
    heldout_ppl_data: str | None
    split: DataSplit | None  # the tuning part, where a held-out set is split off

    @property
    def prompts_split(self) -> DataSplit | None:
        return self.split if self.heldout_prompts is None else None

    @property
    def ppl_split(self) -> DataSplit | None:
        return self.split if self.heldout_ppl_data is None else None


def demo_data() -> DataDefaults:
    """The bundled demo's data sets, the defaults that the commands hand down: what a study
    recipe that records no tuning set stands for, and the held-out sets that go with them."""
    demo = demo_paths()
    return DataDefaults(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        heldout_prompts=demo.prompts_heldout,
        heldout_ppl_data=demo.ppl_heldout,
    )


def demo_models() -> dict[Path, str]:
    """The local model folders with a preset of their own (``default_space_for``): the
    bundled demo's model, searched with ``DEMO_PRESET``."""
    return {demo_paths().model: DEMO_PRESET}


def run_data(plan: RunPlan, manifest_label: str) -> RunData:
    """The plan's data, or one UserInputError naming every option still needed.

    The demo tunes on its bundled tuning sets and verifies on its bundled
    held-out sets; a held-out set that is neither given nor split off is
    missing unless its tuning set is the demo's.
    """
    demo = demo_paths()
    prompts = plan.prompts or (str(demo.prompts_tuning) if plan.demo else None)
    ppl_data = plan.ppl_data or (str(demo.ppl_tuning) if plan.demo else None)
    missing = [option for option, value in (("--prompts", prompts), ("--ppl-data", ppl_data)) if not value]
    split = None
    if plan.heldout_fraction is not None:
        split = DataSplit(heldout_fraction=plan.heldout_fraction, seed=plan.split_seed, part="tuning")
    heldout: dict[str, str | None] = {}
    heldout_missing = []
    for option, given, tuning, bundled, demo_tuning in (
        ("--heldout-prompts", plan.heldout_prompts, prompts, demo.prompts_heldout, demo.prompts_tuning),
        ("--heldout-ppl-data", plan.heldout_ppl_data, ppl_data, demo.ppl_heldout, demo.ppl_tuning),
    ):
        if given:
            heldout[option] = given
        elif split is not None:
            heldout[option] = None
        elif tuning and _same_file(tuning, demo_tuning):
            heldout[option] = str(bundled)
        else:
            heldout[option] = None
            heldout_missing.append(option)
    if missing or heldout_missing:
        needs = []
        if missing:
            needs.append(
                f"its data: {' and '.join(missing)} (a file or hub dataset id each, as 'sweeper eval' takes them)"
            )
        if heldout_missing:
            needs.append(
                f"held-out data for verify: {' and '.join(heldout_missing)}, or --heldout-fraction F "
                "[--split-seed S] to split it off the tuning data"
            )
        what = "the demo with your own data" if plan.demo else f"a run of {manifest_label}"
        raise UserInputError(f"{what} needs {', and '.join(needs)}")
    return RunData(
        prompts=str(prompts),
        ppl_data=str(ppl_data),
        heldout_prompts=heldout["--heldout-prompts"],
        heldout_ppl_data=heldout["--heldout-ppl-data"],
        split=split,
    )


def _same_file(a: str, b: Path) -> bool:
    path = Path(a).expanduser()
    return path.exists() and path.resolve() == b.resolve()


def eval_settings(
    plan: RunPlan, run_dir: Path, data: RunData | None = None, manifest: Manifest | None = None
) -> EvalSettings:
    """The study's measuring settings: the plan's sizes on the tuning data."""
    if data is None:
        data = run_data(plan, plan.manifest or "the demo")
    sizes = plan.sizes
    warmup = warmup_settings_from(manifest) if manifest is not None else WarmupSettings()
    if sizes.warmup_prompts is not None:
        warmup = dataclasses.replace(warmup, num_prompts=sizes.warmup_prompts)
    return EvalSettings(
        prompts=data.prompts,
        ppl_data=data.ppl_data,
        prompts_split=data.prompts_split,
        ppl_split=data.ppl_split,
        tps=TpsSettings(
            num_prompts=sizes.num_prompts,
            output_len=sizes.output_len,
            warmup_requests=sizes.warmup_requests,
        ),
        ppl=PplSettings(max_records=sizes.ppl_records),
        screen=None
        if plan.screen_sizes() is None
        else TpsSettings(
            num_prompts=plan.screen_sizes()[0],
            output_len=plan.screen_sizes()[1],
            warmup_requests=sizes.warmup_requests,
        ),
        warmup=warmup,
        ready_timeout_s=plan.ready_timeout_s,
        keep_port=plan.keep_port,
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
    if plan.manifest is None:
        space = load_run_space(plan.space or DEMO_PRESET).bind(manifest.env)
    else:  # the manifest's own values of the searched knobs become the first trial
        spec = plan.space or default_space_for(manifest, local_models=demo_models())
        if spec is None:
            raise UserInputError(
                f"{manifest_path}: no preset fits {model_text(manifest)}; pass --space "
                f"(a preset: {', '.join(preset_names())}, or a YAML/TOML file)"
            )
        space = plan_from_manifest(manifest, load_run_space(spec)).space
    for index, config in enumerate(plan.enqueued_configs()):
        space.check_params(config, f"--enqueue #{index + 1}")
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
    counts = {
        "prompts": len(tuning.prompts) if tuning.prompts is not None else 0,
        "ppl_records": len(tuning.ppl_records) if tuning.ppl_records is not None else 0,
        "heldout_prompts": len(heldout.prompts) if heldout.prompts is not None else 0,
        "heldout_ppl_records": len(heldout.ppl_records) if heldout.ppl_records is not None else 0,
    }
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


def _check_heldout(manifest: Manifest, recipe: StudyRecipe) -> EvalData:
    """Load the held-out data as verify will (and fail now, not after the night)."""
    from sweeper.answer import heldout_data, heldout_settings

    return load_eval_data(manifest, heldout_settings(recipe, heldout_data(recipe, defaults=demo_data())))


def _with_stored_connection(settings: EvalSettings, study: StoredStudy | None, study_name: str) -> EvalSettings:
    """A resumed study measures TPS with the connection protocol it was measured with."""
    stored = None if study is None else study.recipe
    if stored is None or stored.connection == settings.tps.connection:
        return settings
    logger.info(
        "study %s measured TPS with the %r connection protocol: its new trials do too",
        study_name,
        stored.connection,
    )
    connection = {"connection": stored.connection}
    return dataclasses.replace(
        settings,
        tps=dataclasses.replace(settings.tps, **connection),
        screen=None if settings.screen is None else dataclasses.replace(settings.screen, **connection),
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
