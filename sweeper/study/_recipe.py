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

from storage import STUDY_ATTR_PREFIX, normalize_url, optuna_storage, redact
from sweeper.errors import StorageError, UserInputError
from sweeper.manifest import Manifest

logger = logging.getLogger(__name__)

RECIPE_ATTR = f"{STUDY_ATTR_PREFIX}recipe"
RECIPE_KEY = "recipe"  # the same attribute as StudyStatus.settings shows it (prefix removed)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyRecipe:
    """How the study's trials were measured.

    ``prompts``/``ppl_data`` None: the bundled demo's tuning sets;
    ``heldout_prompts``/``heldout_ppl_data`` None: the demo's held-out sets
    when the study tuned on the demo's, else unknown (verify asks for them).
    ``overrides``: env values set on every trial on top of the base manifest
    (``EvalSettings.overrides`` of the study's evaluator).
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

    def __post_init__(self) -> None:
        for name in ("num_prompts", "output_len", "warmup_requests", "warmup_prompts", "ppl_records"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise UserInputError(f"study recipe: {name} must be a non-negative integer, not {value!r}")
        for key, value in self.overrides.items():
            if not isinstance(value, str):
                raise UserInputError(f"study recipe: overrides[{key!r}] must be a string")

    @property
    def tunes_on_demo_data(self) -> bool:
        """Did the study tune on the bundled demo's tuning sets (given as None or by path)?"""
        from sweeper.demo import demo_paths

        demo = demo_paths()
        return _is(self.prompts, demo.prompts_tuning) and _is(self.ppl_data, demo.ppl_tuning)

    def to_attr(self) -> dict[str, Any]:
        """The JSON value stored in the study's ``sweeper:recipe`` attribute."""
        data = dataclasses.asdict(self)
        data["overrides"] = dict(self.overrides)
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
    ) -> StudyRecipe:
        """The recipe of a study whose trials an ``EvalSettings`` measured (``sweeper run``)."""
        tps, ppl, warmup = settings.tps, settings.ppl, settings.warmup
        return cls(
            base_manifest=absolute(base_manifest),
            prompts=absolute(settings.prompts),
            ppl_data=absolute(settings.ppl_data),
            heldout_prompts=absolute(heldout_prompts),
            heldout_ppl_data=absolute(heldout_ppl_data),
            num_prompts=tps.num_prompts if tps else None,
            output_len=tps.output_len if tps else None,
            warmup_requests=tps.warmup_requests if tps else None,
            warmup_prompts=warmup.num_prompts if warmup is not None and warmup.enabled else None,
            ppl_records=ppl.max_records if ppl else None,
            overrides=dict(settings.overrides),
        )

    def replace(self, **changes: Any) -> StudyRecipe:
        """A copy with the given fields replaced; ``None`` values keep the stored ones."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _is(value: str | None, path: Path) -> bool:
    if value is None:
        return True
    candidate = Path(value).expanduser()
    return candidate.exists() and candidate.resolve() == path.resolve()


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


def base_manifest_of(recipe: StudyRecipe, base_manifest: Manifest | None = None) -> Manifest:
    """The given base manifest, else the one the study recorded (ManifestError if unreadable)."""
    if base_manifest is not None:
        return base_manifest
    if recipe.base_manifest:
        return Manifest.load(recipe.base_manifest)
    raise UserInputError(
        "the study does not record its base manifest: pass it with --manifest "
        "(the manifest the study was run on)"
    )
