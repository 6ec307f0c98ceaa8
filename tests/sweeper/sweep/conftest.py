"""A 'user' set-up made of the demo's parts: a non-demo copy of its manifest and its data
files copied under other names, so that ``sweeper run --manifest`` treats them as the user's."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest


@dataclasses.dataclass(frozen=True)
class UserSetup:
    folder: Path
    manifest: Path
    prompts: Path
    ppl_data: Path
    heldout_prompts: Path
    heldout_ppl_data: Path

    def data_args(self, *, heldout: bool = True) -> list[str]:
        args = ["--prompts", str(self.prompts), "--ppl-data", str(self.ppl_data)]
        if heldout:
            args += ["--heldout-prompts", str(self.heldout_prompts), "--heldout-ppl-data", str(self.heldout_ppl_data)]
        return args


def make_user_setup(folder: Path, demo, *, port: int | None = None, name: str = "my-tiny-gemma") -> UserSetup:
    folder.mkdir(parents=True, exist_ok=True)
    for part in ("model", "drafter"):  # the same weights, reached through the user's folder
        link = folder / part
        if not link.exists():
            link.symlink_to(getattr(demo, part), target_is_directory=True)
    data = json.loads(demo.manifest.read_text())
    data["name"] = name
    if port is not None:
        data["port"] = port
    manifest = folder / "my-manifest.json"
    data["serve"] = [part if part != demo.manifest.name else manifest.name for part in data["serve"]]
    manifest.write_text(json.dumps(data, indent=2))
    files = {
        "prompts": folder / "my-prompts.json",
        "ppl_data": folder / "my-ppl.jsonl",
        "heldout_prompts": folder / "my-heldout-prompts.json",
        "heldout_ppl_data": folder / "my-heldout-ppl.jsonl",
    }
    shutil.copyfile(demo.prompts_tuning, files["prompts"])
    shutil.copyfile(demo.ppl_tuning, files["ppl_data"])
    shutil.copyfile(demo.prompts_heldout, files["heldout_prompts"])
    shutil.copyfile(demo.ppl_heldout, files["heldout_ppl_data"])
    return UserSetup(folder=folder, manifest=manifest, **files)


@pytest.fixture
def user_setup(tmp_path, demo) -> UserSetup:
    return make_user_setup(tmp_path / "mine", demo)


@pytest.fixture
def make_user(tmp_path, demo):
    """``make_user(name, port=None)``: another user set-up under tmp_path."""

    def make(name: str = "mine", *, port: int | None = None) -> UserSetup:
        return make_user_setup(tmp_path / name, demo, port=port)

    return make
