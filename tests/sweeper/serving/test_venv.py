"""The server venv: created once from a manifest's dependencies, keyed by their hash, reused;
a failed install caches nothing. The dependency is a tiny wheel built by the test (no index needed)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.manifest import Manifest
from sweeper.serving import ServerVenvError, dependencies_key, server_venv


def write_manifest(folder: Path, dependencies: list[str]) -> Path:
    path = folder / "manifest.json"
    path.write_text(json.dumps({"name": "probe", "dependencies": dependencies, "serve": ["python", "serve.py"]}))
    return path


def python_version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sys; print(sys.version_info[:3])"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_server_venv_is_created_once_keyed_by_its_dependencies_and_reused(
    tmp_path, monkeypatch, capsys, build_wheel
) -> None:
    from sweeper.cli import main

    submission = tmp_path / "submission"
    build_wheel(submission / "wheels")
    dependencies = ["./wheels/sweeper_probe-0.1-py3-none-any.whl"]  # relative to the manifest's folder
    manifest = Manifest.load(write_manifest(submission, dependencies))
    cache = tmp_path / "cache"
    monkeypatch.setenv("SWEEPER_VENV_CACHE", str(cache))

    # `sweeper env MANIFEST` prints the interpreter of the new venv
    monkeypatch.setattr(sys, "argv", ["sweeper", "env", str(submission / "manifest.json"), "--json"])
    main()
    made = json.loads(capsys.readouterr().out)
    version = ".".join(map(str, sys.version_info[:3]))
    key = hashlib.sha256(
        json.dumps({"dependencies": dependencies, "python": version}, sort_keys=True).encode()
    ).hexdigest()[:16]
    assert made["key"] == key == dependencies_key(dependencies)
    assert made["path"] == str(cache / key) and made["python"] == str(cache / key / "bin" / "python")
    assert made["created"] is True
    python = Path(made["python"])
    probe = subprocess.run(
        [str(python), "-c", "import sweeper_probe, sys; print(sweeper_probe.VALUE, sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert probe == ["42", str(cache / key)]  # installed into that venv, which runs from its final folder
    assert python_version(python) == str(sys.version_info[:3])
    assert sorted(p.name for p in cache.iterdir()) == [key]  # no build folder left behind

    # the same list again: reused, not reinstalled
    stamp = (cache / key / "sweeper-venv.json").stat().st_mtime_ns
    again = server_venv(manifest.dependencies, cwd=manifest.folder)
    assert (again.created, again.python) == (False, python)
    assert (cache / key / "sweeper-venv.json").stat().st_mtime_ns == stamp
    # and it is the interpreter a `python ...` serve command then runs with
    assert manifest.with_server_python(again.python).resolve_serve_command() == [str(python), "serve.py"]

    # another list is another venv
    build_wheel(submission / "wheels", version="0.2", value=43)
    other = ["./wheels/sweeper_probe-0.2-py3-none-any.whl"]
    assert dependencies_key(other) != key


def test_a_failed_install_is_a_clear_error_and_caches_nothing(tmp_path, monkeypatch, capsys) -> None:
    from sweeper.cli import main

    cache = tmp_path / "cache"
    manifest_path = write_manifest(tmp_path, ["./no-such-package-1.0-py3-none-any.whl"])
    with pytest.raises(
        ServerVenvError,
        match=r"pip install ./no-such-package-1.0-py3-none-any.whl failed "
        r"\(exit code 1\); nothing was cached: .*no-such-package",
    ):
        server_venv(Manifest.load(manifest_path).dependencies, cwd=tmp_path, cache_root=cache)
    assert list(cache.iterdir()) == []

    monkeypatch.setattr(sys, "argv", ["sweeper", "env", str(manifest_path), "--cache-dir", str(cache)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == ""
    assert err.startswith("error: pip install ./no-such-package-1.0-py3-none-any.whl failed") and err.count("\n") == 1
    assert list(cache.iterdir()) == []


def test_no_dependencies_is_an_error(tmp_path) -> None:
    with pytest.raises(ServerVenvError, match="the manifest lists no dependencies"):
        server_venv((), cache_root=tmp_path)
    assert list(tmp_path.iterdir()) == []
