"""What a study was run with, kept in the study so that verify and export can re-create it.

A study's trials store their env overrides, but re-running a trial needs
more: the base manifest (its folder resolves relative model paths), the
TPS settings the tuned figures were measured with (a held-out TPS is only
comparable when measured the same way), the tuning data and the held-out
data. ``sweeper run`` records these once as study user attributes
(``sweeper:recipe``); ``sweeper verify`` and ``sweeper export`` read them,
and their command-line options fill in or replace what is missing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storage import STUDY_ATTR_PREFIX, TrialStore, normalize_url, optuna_storage, redact
from sweeper.errors import StorageError, UserInputError
from sweeper.manifest import Manifest

logger = logging.getLogger(__name__)
# measure_tps's protocol before 2026-12-02, so that of every study stored without one
LEGACY_CONNECTION = "keep-alive"

RECIPE_ATTR = f"{STUDY_ATTR_PREFIX}recipe"
RECIPE_KEY = "recipe"  # the same attribute as StudyStatus.settings shows it (prefix removed)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataDefaults:
    """The data sets that a recipe recording none stands for, handed down by whoever plans
    the command (the command line and ``sweeper.sweep`` pass the bundled demo's).

    ``prompts``/``ppl_data``: the tuning sets a recipe's None means;
    ``heldout_prompts``/``heldout_ppl_data``: the held-out sets that go with
    them, verified on when a study tuned on them and records no held-out set.
    """

    prompts: str | os.PathLike[str]
    ppl_data: str | os.PathLike[str]
    heldout_prompts: str | os.PathLike[str]
    heldout_ppl_data: str | os.PathLike[str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyRecipe:
    """How the study's trials were measured.

    ``prompts``/``ppl_data`` None: the reader's default tuning sets
    (``DataDefaults``; those of the command line are the bundled demo's);
    ``heldout_prompts``/``heldout_ppl_data`` None: the default held-out sets
    when the study tuned on the default tuning sets, else unknown (verify
    asks for them).
    ``overrides``: env values set on every trial on top of the base manifest
    (``EvalSettings.overrides`` of the study's evaluator).

    ``heldout_fraction``/``split_seed``: the held-out set of each kind
    (prompts, PPL records) that is not given as a file was split off the
    tuning set by this seeded fraction; the study tuned on the rest, and
    verify re-creates the same split to measure on the held-out part.
    ``data_counts``: how many prompts / PPL records each part held
    (``prompts``, ``ppl_records``, ``heldout_prompts``, ``heldout_ppl_records``).
    ``server_python``, ``keep_port``, ``ready_timeout_s``: how the servers were
    started, so that verification starts them the same way. ``tps_connection``:
    ``measure_tps``'s connection protocol (``TpsSettings.connection``); a recipe
    stored before it was recorded measured on one keep-alive connection
    (``connection`` says so).
    """

    base_manifest: str | None = None
    prompts: str | None = None
    ppl_data: str | None = None
    heldout_prompts: str | None = None
    heldout_ppl_data: str | None = None
    num_prompts: int | None = None
    output_len: int | None = None
    warmup_requests: int | None = None
    warmup_prompts: int | None = None
    ppl_records: int | None = None
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
    heldout_fraction: float | None = None
    split_seed: int | None = None
    data_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    ready_timeout_s: float | None = None
    server_python: str | None = None
    keep_port: bool = False
    tps_connection: str | None = None

    @property
    def connection(self) -> str:
        """The protocol the study's TPS was measured with (older recipes: keep-alive)."""
        return self.tps_connection or LEGACY_CONNECTION

    def __post_init__(self) -> None:
        for name in ("num_prompts", "output_len", "warmup_requests", "warmup_prompts", "ppl_records", "split_seed"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise UserInputError(f"study recipe: {name} must be a non-negative integer, not {value!r}")
        for key, value in self.data_counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserInputError(f"study recipe: data_counts[{key!r}] must be a non-negative integer")
        fraction = self.heldout_fraction
        if fraction is not None and (
            isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1
        ):
            raise UserInputError(f"study recipe: heldout_fraction must be between 0 and 1, not {fraction!r}")
        timeout = self.ready_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise UserInputError(f"study recipe: ready_timeout_s must be positive, not {timeout!r}")
        if not isinstance(self.keep_port, bool):
            raise UserInputError(f"study recipe: keep_port must be true or false, not {self.keep_port!r}")
        for key, value in self.overrides.items():
            if not isinstance(value, str):
                raise UserInputError(f"study recipe: overrides[{key!r}] must be a string")

    def tunes_on(self, defaults: DataDefaults | None) -> bool:
        """Did the study tune on the default tuning sets (recorded as None or by path)?
        Never with no defaults."""
        if defaults is None:
            return False
        return _is(self.prompts, defaults.prompts) and _is(self.ppl_data, defaults.ppl_data)

    def split_of(self, kind: str) -> tuple[float, int] | None:
        """(held-out fraction, seed) when the held-out ``kind`` ("prompts" or "ppl_data")
        was split off the tuning set, else None (given as its own set, or none)."""
        given = {"prompts": self.heldout_prompts, "ppl_data": self.heldout_ppl_data}[kind]
        if given is not None or self.heldout_fraction is None:
            return None
        return float(self.heldout_fraction), int(self.split_seed or 0)

    def to_attr(self) -> dict[str, Any]:
        """The JSON value stored in the study's ``sweeper:recipe`` attribute."""
        data = dataclasses.asdict(self)
        data["overrides"] = dict(self.overrides)
        data["data_counts"] = dict(self.data_counts)
        return data

    @classmethod
    def from_attr(cls, value: Any) -> StudyRecipe:
        if not isinstance(value, Mapping):
            return cls()
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: val for key, val in value.items() if key in known})

    @classmethod
    def from_eval_settings(
        cls,
        base_manifest: str | os.PathLike[str] | None,
        settings: Any,
        *,
        heldout_prompts: str | None = None,
        heldout_ppl_data: str | None = None,
        server_python: str | None = None,
        data_counts: Mapping[str, int] | None = None,
    ) -> StudyRecipe:
        """The recipe of a study whose trials an ``EvalSettings`` measured (``sweeper run``).

        A held-out kind not given here is split off by the settings' ``prompts_split``
        / ``ppl_split`` (their fraction and seed are recorded), else there is none.
        """
        tps, ppl, warmup = settings.tps, settings.ppl, settings.warmup
        split = getattr(settings, "prompts_split", None) or getattr(settings, "ppl_split", None)
        if warmup is None:
            warmup_prompts = None
        else:
            warmup_prompts = warmup.num_prompts if warmup.enabled else 0
        return cls(
            base_manifest=absolute(base_manifest),
            prompts=absolute(settings.prompts),
            ppl_data=absolute(settings.ppl_data),
            heldout_prompts=absolute(heldout_prompts),
            heldout_ppl_data=absolute(heldout_ppl_data),
            num_prompts=tps.num_prompts if tps else None,
            output_len=tps.output_len if tps else None,
            warmup_requests=tps.warmup_requests if tps else None,
            warmup_prompts=warmup_prompts,
            ppl_records=ppl.max_records if ppl else None,
            overrides=dict(settings.overrides),
            heldout_fraction=split.heldout_fraction if split is not None else None,
            split_seed=split.seed if split is not None else None,
            data_counts=dict(data_counts or {}),
            ready_timeout_s=float(settings.ready_timeout_s),
            server_python=server_python,
            keep_port=bool(getattr(settings, "keep_port", False)),
            tps_connection=tps.connection if tps else None,
        )

    def replace(self, **changes: Any) -> StudyRecipe:
        """A copy with the given fields replaced; ``None`` values keep the stored ones."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _is(value: str | None, path: str | os.PathLike[str]) -> bool:
    if value is None:
        return True
    candidate = Path(value).expanduser()
    return candidate.exists() and candidate.resolve() == Path(path).resolve()


def recipe_from_settings(settings: Mapping[str, Any]) -> StudyRecipe:
    """The recipe in a StudyStatus's ``settings`` (an empty recipe when none was stored)."""
    return StudyRecipe.from_attr(settings.get(RECIPE_KEY))


def absolute(path: str | os.PathLike[str] | None) -> str | None:
    """A local file made absolute (so the recipe works from any folder); ids stay as they are."""
    if path is None:
        return None
    candidate = Path(path).expanduser()
    return str(candidate.resolve()) if candidate.exists() else str(path)


def save_recipe(url: str | None, study_name: str, recipe: StudyRecipe) -> None:
    """Store the recipe in the study (``sweeper run`` calls this once the study exists)."""
    import optuna

    url = normalize_url(url)
    storage = optuna_storage(url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
        study.set_user_attr(RECIPE_ATTR, recipe.to_attr())
    except KeyError as exc:
        raise StorageError(f"no study named {study_name!r} in {redact(url)}") from exc
    finally:
        storage.remove_session()
    logger.info("stored the study recipe of %s", study_name)


# what makes two trials' numbers comparable: a study resumed with other values would mix them
MEASURING_FIELDS = (
    "prompts",
    "ppl_data",
    "heldout_prompts",
    "heldout_ppl_data",
    "heldout_fraction",
    "split_seed",
    "num_prompts",
    "output_len",
    "warmup_requests",
    "warmup_prompts",
    "ppl_records",
    "tps_connection",
)


def recipe_changes(stored: StudyRecipe, new: StudyRecipe) -> dict[str, tuple[Any, Any]]:
    """The measuring fields whose value differs: name -> (stored, new); unrecorded ones are skipped."""
    return {
        name: (getattr(stored, name), getattr(new, name))
        for name in MEASURING_FIELDS
        if getattr(stored, name) is not None and getattr(stored, name) != getattr(new, name)
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredStudy:
    """What a run needs to know of a study that exists: its user attributes (its recipe and
    gate among them) and its trials that count toward the budget (complete or failed)."""

    attrs: Mapping[str, Any]
    trials_done: int

    @property
    def recipe(self) -> StudyRecipe | None:
        value = self.attrs.get(RECIPE_ATTR)
        return None if value is None else StudyRecipe.from_attr(value)


def read_stored_study(url: str | None, study_name: str) -> StoredStudy | None:
    """The study as stored, read through one connection to its database; None for a study
    (or SQLite file) that does not exist yet. Creates no file."""
    import optuna
    from sqlalchemy.engine import make_url

    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        return None
    storage = optuna_storage(url)
    try:
        try:
            study = optuna.load_study(study_name=study_name, storage=storage)
        except KeyError:
            return None
        attrs = dict(study.user_attrs)
        store = TrialStore(url, engine=storage.engine)  # our tables, on the same engine
        done = store.count(study_name, ("complete", "failed"))
    finally:
        storage.remove_session()
        storage.engine.dispose()
    return StoredStudy(attrs=attrs, trials_done=done)


def base_manifest_of(recipe: StudyRecipe, base_manifest: Manifest | None = None) -> Manifest:
    """The given base manifest, else the one the study recorded (ManifestError if unreadable)."""
    if base_manifest is not None:
        return base_manifest
    if recipe.base_manifest:
        return Manifest.load(recipe.base_manifest)
    raise UserInputError(
        "the study does not record its base manifest: pass it with --manifest (the manifest the study was run on)"
    )
