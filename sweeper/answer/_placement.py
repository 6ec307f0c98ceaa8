"""An exported manifest that installs this project and runs where it is copied.

``place_manifest(base, env, output, **fields)`` is the base manifest with
``env`` and ``fields``, made ready to be written at ``output``:

- **Paths** name the same files from the exported manifest's folder. Every
  env value (also inside JSON values such as ``SPECULATIVE_CONFIG.model``),
  ``model_id``, the ``serve`` command and arguments and the local-path
  ``dependencies`` that name something that exists (relative to the base
  manifest's folder, or absolute) are written relative to the exported
  manifest's folder when they lie in it or below it (the folder then runs
  wherever it is copied), else absolute, returned by field so that the caller
  warns: the manifest then runs only where those paths exist. Paths stay in
  the user's spelling: a symbolic link is written as the link, not its target.
- **Dependencies** that name this project (its distribution, or ``sweeper``,
  its former name, which on the package index is another project) are pinned
  to this version, extras and markers kept: ``sweeper-serving[cpu]==0.1.0``.
  Every other dependency, and the ``serve`` command, are the base manifest's own.
- A ``serve`` argument naming the base manifest file itself
  (``sweeper serve manifest.json``) is renamed to the exported file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sweeper import __version__
from sweeper.manifest import Manifest
from sweeper.versions import DISTRIBUTION

logger = logging.getLogger(__name__)

# names that mean this project in a dependency list: its distribution and its former name
OWN_NAMES = frozenset({canonicalize_name(DISTRIBUTION), "sweeper"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlacedManifest:
    """A manifest ready to be written at its ``source``, with what placing it changed.

    ``absolute_paths``: field -> the absolute path it names, outside the
    manifest's folder (the manifest runs only where these exist);
    ``pinned``: dependency as the base manifest wrote it -> as written now.
    """

    manifest: Manifest
    absolute_paths: Mapping[str, str]
    pinned: Mapping[str, str]

    def absolute_paths_warning(self, shown_folder: str | None = None) -> str | None:
        """One line naming each absolute path, or None when the manifest names none."""
        return absolute_paths_warning(self.absolute_paths, shown_folder or str(self.manifest.folder))


def absolute_paths_warning(absolute_paths: Mapping[str, str], folder: str) -> str | None:
    """``2 path(s) outside answer are written absolute, ...: env.MODEL_ID = /x/model, ...``; None for none."""
    if not absolute_paths:
        return None
    named = ", ".join(f"{field} = {path}" for field, path in absolute_paths.items())
    return (
        f"{len(absolute_paths)} path(s) outside {folder} are written absolute, so the manifest "
        f"runs only where they exist: {named}"
    )


def pin_dependency(requirement: str) -> str:
    """A dependency naming this project pinned to this version (extras and markers kept); others as written."""
    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return requirement  # a path, an option, a URL: not a name on the index
    if parsed.url or canonicalize_name(parsed.name) not in OWN_NAMES:
        return requirement
    extras = f"[{','.join(sorted(parsed.extras))}]" if parsed.extras else ""
    marker = f"; {parsed.marker}" if parsed.marker else ""
    return f"{DISTRIBUTION}{extras}=={__version__}{marker}"


def place_manifest(base: Manifest, env: Mapping[str, str], output: Path, **fields: Any) -> PlacedManifest:
    """``base`` with ``env`` and ``fields``, its paths and dependencies placed for a file at ``output``
    (see the module's docstring); checked as a manifest sweeper accepts."""
    output = Path(os.path.abspath(output))
    placer = _PathPlacer(base.folder.resolve(), output.parent.resolve())
    serve = list(base.serve)
    if base.source is not None:
        serve = [output.name if part == base.source.name else part for part in serve]
    head = serve[0]
    if os.sep in head:  # a command given by its path; a bare name is looked up on PATH
        head = placer.place(head, "serve[0]")
    serve = [
        head,
        *(placer.place(part, f"serve[{i}]", keep=output.name) for i, part in enumerate(serve[1:], start=1)),
    ]
    placed_env = {key: placer.place(value, f"env.{key}") for key, value in env.items()}
    model_id = placer.place(base.model_id, "model_id")
    dependencies: list[str] = []
    pinned: dict[str, str] = {}
    for i, dependency in enumerate(base.dependencies):
        if _names_local_path(dependency):
            dependencies.append(placer.place(dependency, f"dependencies[{i}]"))
            continue
        written = pin_dependency(dependency)
        if written != dependency:
            pinned[dependency] = written
        dependencies.append(written)
    manifest = dataclasses.replace(
        base,
        env=placed_env,
        serve=tuple(serve),
        model_id=model_id,
        dependencies=tuple(dependencies),
        source=output,
        **fields,
    )
    # the result must be a manifest sweeper itself accepts
    Manifest.from_dict(manifest.to_dict(), source=output)
    if pinned:
        logger.debug("pinned dependencies: %s", pinned)
    if placer.absolute:
        logger.debug("paths outside %s written absolute: %s", output.parent, placer.absolute)
    return PlacedManifest(manifest=manifest, absolute_paths=dict(placer.absolute), pinned=pinned)


class _PathPlacer:
    """Writes each path that names an existing file or folder relative to ``out_folder`` when it
    lies in it or below, else absolute (recorded in ``absolute``); leaves every other value alone."""

    def __init__(self, base_folder: Path, out_folder: Path) -> None:
        self.base_folder = base_folder
        self.out_folder = out_folder
        self.absolute: dict[str, str] = {}

    def place(self, value: str, where: str, *, keep: str | None = None) -> str:
        text = value.strip()
        if text.startswith("{"):
            try:
                document = json.loads(text)
            except json.JSONDecodeError:
                return value
            if not isinstance(document, dict):
                return value
            placed = self._walk(document, where)
            return json.dumps(placed, separators=(",", ":")) if placed != document else value
        if text == keep or not _may_be_path(text):
            return value
        expanded = os.path.expanduser(text)
        # absolute in the user's own spelling: a symbolic link (entry/drafter) stays the link
        target = os.path.abspath(expanded if os.path.isabs(expanded) else self.base_folder / expanded)
        if not os.path.exists(target):
            return value
        if Path(target).is_relative_to(self.out_folder):
            relative = os.path.relpath(target, self.out_folder)
            return value if os.path.normpath(text) == relative else relative
        self.absolute[where] = target
        return target

    def _walk(self, node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {key: self._walk(item, f"{where}.{key}") for key, item in node.items()}
        if isinstance(node, list):
            return [self._walk(item, f"{where}[{i}]") for i, item in enumerate(node)]
        if isinstance(node, str):
            return self.place(node, where)
        return node


def _may_be_path(text: str) -> bool:
    if not text or text.startswith("-") or "://" in text or any(c.isspace() for c in text):
        return False
    try:
        float(text)
        return False
    except ValueError:
        return True


def _names_local_path(dependency: str) -> bool:
    """A dependency pip reads as a local path (a wheel, a project folder), as pip tells them apart."""
    text = dependency.strip()
    return not text.startswith("-") and "://" not in text and (text.startswith(".") or "/" in text)
