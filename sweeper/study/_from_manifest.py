"""Start a study from an existing manifest: its env is the base, its values the first trial.

``plan_from_manifest(manifest, space)`` binds the search space to the
manifest's env and reads the manifest's own value of every searched
parameter. ``sweeper run --manifest M`` runs ``plan.space`` on
``plan.base_manifest``; the space's enqueued configs are reordered so that
the manifest's own values come first (a config also named ``baseline`` in
the space is the same trial, run once under both names). ``sweeper import M``
only shows the plan.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from search_spaces import MISSING, BaseValueError, EnqueuedConfig, SearchSpace
from sweeper.errors import ManifestError, SearchSpaceError
from sweeper.manifest import Manifest, is_secret_name

logger = logging.getLogger(__name__)

IMPORTED_PREFIX = "imported"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchedParameter:
    """A parameter the study will search, and where the manifest's value came from."""

    name: str
    value: Any
    source: str  # "env NAME" / "env NAME.path" (read from the manifest) or "default"
    affects: str
    low: Any = None
    high: Any = None
    choices: tuple[Any, ...] = ()
    in_range: bool = True

    def describe_range(self) -> str:
        if self.choices:
            return "{" + ", ".join(map(str, self.choices)) + "}"
        return f"{self.low:g}..{self.high:g}" if self.low is not None else "-"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportPlan:
    """What ``sweeper run --manifest M`` would search, and from where.

    ``base_manifest``: the manifest as loaded (secrets kept: the servers
    need them; show ``base_manifest.redacted()``). ``space``: the space bound
    to its env, the manifest's own values enqueued first under
    ``enqueue_name``. ``enqueued_params``: those values. ``searched``: the
    parameters and their values. ``fixed``: env values no parameter writes
    (kept in every trial; secrets left out). ``skipped``: parameters of the
    space that do not apply to this manifest, with the reason.
    """

    base_manifest: Manifest
    space: SearchSpace
    enqueue_name: str
    enqueued_params: Mapping[str, Any]
    searched: tuple[SearchedParameter, ...]
    fixed: Mapping[str, str]
    skipped: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest": str(self.base_manifest.source or self.base_manifest.name),
            "name": self.base_manifest.name,
            "space": self.space.name,
            "enqueue_name": self.enqueue_name,
            "enqueued_params": dict(self.enqueued_params),
            "searched": [p.to_dict() for p in self.searched],
            "fixed": dict(self.fixed),
            "skipped": [{"name": n, "reason": why} for n, why in self.skipped],
            "enqueue_order": [c.name for c in self.space.enqueue],
        }


def plan_from_manifest(manifest: Manifest, space: SearchSpace) -> ImportPlan:
    """Bind ``space`` to the manifest's env and enqueue the manifest's own values first.

    Raises SearchSpaceError when the space cannot take this manifest (a
    parameter writes into an env value the manifest lacks) or when a
    searched parameter has neither a value in the manifest nor a default.
    """
    label = str(manifest.source or manifest.name)
    try:
        bound = space.bind(manifest.env)
    except BaseValueError as exc:  # the manifest's value is wrong, not the space
        raise ManifestError(label, f"env.{exc.field}", exc.problem) from None
    except SearchSpaceError as exc:
        raise SearchSpaceError(f"{label} cannot be searched with space {space.name!r}: {exc}") from None
    kept = set(bound.names)
    skipped = tuple((p.name, _skip_reason(p, manifest.env, kept)) for p in space.parameters if p.name not in kept)
    try:
        values = bound.base_values()
    except SearchSpaceError as exc:
        raise SearchSpaceError(f"{label}: {exc}") from None
    searched = tuple(_searched(bound, name, value) for name, value in values.items())
    for item in searched:
        if not item.in_range:
            logger.warning(
                "%s: %s=%r is outside the searched range %s: it is tried first all the same",
                label,
                item.name,
                item.value,
                item.describe_range(),
            )
    written = {target.env for p in bound.parameters for target in p.targets}
    fixed = {key: value for key, value in manifest.env.items() if key not in written and not is_secret_name(key)}
    enqueue_name = f"{IMPORTED_PREFIX}:{manifest.name}"
    first = EnqueuedConfig(name=enqueue_name, params=dict(values))
    # a config of the space with the same values stays listed: the study runs it once,
    # under both names ("imported:M+baseline"), in the first place
    planned = dataclasses.replace(bound, enqueue=(first, *bound.enqueue))
    return ImportPlan(
        base_manifest=manifest,
        space=planned,
        enqueue_name=enqueue_name,
        enqueued_params=dict(values),
        searched=searched,
        fixed=fixed,
        skipped=skipped,
    )


def _searched(space: SearchSpace, name: str, value: Any) -> SearchedParameter:
    parameter = space.parameter(name)
    source = "default"
    for target in parameter.targets:
        if target.read(space.base_env) is not MISSING:
            source = f"env {target.describe()}"
            break
    return SearchedParameter(
        name=name,
        value=value,
        source=source,
        affects=parameter.affects,
        low=parameter.low,
        high=parameter.high,
        choices=tuple(parameter.choices),
        in_range=parameter.contains(value),
    )


def _skip_reason(parameter: Any, env: Mapping[str, str], kept: set[str]) -> str:
    condition = parameter.condition
    if condition is not None and condition.env_set and not env.get(condition.env_set):
        return f"applies only when {condition.describe()}"
    if condition is not None and condition.param and condition.param not in kept:
        return f"depends on {condition.param}, which is not searched"
    return "not applicable to this manifest"


GEMMA4_SPACE = "gemma4-e4b-a10g"


def default_space_for(
    manifest: Manifest, *, local_models: Mapping[str | os.PathLike[str], str] | None = None
) -> str | None:
    """The preset that fits a manifest: the one ``local_models`` gives for the model folder it
    serves (the caller's: the command line maps the bundled demo's model to its preset), the
    challenge's for Gemma 4 E4B; None when neither fits (the user names a space)."""
    model = manifest.env.get("MODEL_ID") or manifest.model_id
    if model and local_models:
        candidate = Path(model).expanduser()
        candidate = candidate if candidate.is_absolute() else manifest.folder / candidate
        if candidate.exists():
            served = candidate.resolve()
            for folder, preset in local_models.items():
                if served == Path(folder).resolve():
                    return preset
    if "gemma-4-e4b" in model.lower():
        return GEMMA4_SPACE
    return None


def model_text(manifest: Manifest) -> str:
    """The manifest's model in words, for a manifest no preset fits: with the folder of it
    (or of its drafter) that is missing, or a SPECULATIVE_CONFIG that does not parse."""
    text = f"its model {manifest.env.get('MODEL_ID') or manifest.model_id!r}"
    try:
        manifest.check_local_models()
    except ManifestError as exc:
        return f"{text} ({exc.field}: {exc.problem})" if exc.field else f"{text} ({exc.problem})"
    return text


def describe_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
