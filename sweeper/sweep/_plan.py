"""``RunPlan``: every choice of one ``sweeper run`` (a base manifest + a search space -> a study).

``RunPlan`` holds every choice of one run and checks each value as it is
made (a bad option is a ``UserInputError`` naming it, before anything is
shown or written). Its sizes depend on the run: the bundled demo keeps its
small preset (``DEMO_SIZES``: 8 prompts x 128 tokens, 1 warm-up request),
any other manifest gets the challenge's (``CHALLENGE_SIZES``: 128 x 512, 4
warm-up requests, the 64-prompt warm-up bridge). What the plan resolves to
is checked and run in ``_run`` (``prepare``, ``execute``); its data in
``_run_data``.

A run on the user's own manifest needs its data (``--prompts``,
``--ppl-data``) and held-out data, given (``--heldout-prompts``,
``--heldout-ppl-data``) or split off the tuning data by a seeded fraction
(``--heldout-fraction``, ``--split-seed``); the demo has bundled sets of both.
"""

from __future__ import annotations

import dataclasses
import logging
import math

from evaluators import TpsSettings
from search_spaces import SearchSpace
from storage import check_url
from sweeper.errors import UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import DataSplit
from sweeper.study import (
    DEFAULT_NOISE,
    MODES,
    PPL_GATE_CONFIDENCE,
    SAMPLERS,
    ConfirmSettings,
    ConfirmSettingsError,
    parse_duration,
)
from sweeper.sweep._gpus import parse_gpus

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
        for option, duration in (("timeout", self.timeout), ("trial-timeout", self.trial_timeout)):
            if duration is None:
                continue
            try:
                seconds = parse_duration(duration)
            except UserInputError as exc:
                raise UserInputError(f"--{option}: {str(exc).split(': ', 1)[-1]}") from None
            if seconds is not None and not seconds > 0:
                raise UserInputError(f"--{option} must be longer than 0 s, not {duration!r}")
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
        """A new study's level when none is given: ``PPL_GATE_CONFIDENCE``, under an absolute
        cap and a relative one alike (docs/study.md, "The gate")."""
        return PPL_GATE_CONFIDENCE

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


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(option: str, value: object, *, zero: bool = False) -> None:
    if value is None:
        return
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative integer" if zero else "a positive integer"
        raise UserInputError(f"{option} must be {kind}, not {value!r}")
