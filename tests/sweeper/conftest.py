"""Fixtures shared by the tests of sweeper's sub-packages: synthetic studies (see synthetic_study.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def load_synthetic():
    """tests/sweeper/synthetic_study.py as a module (the tests are not a package)."""
    name = "sweeper_tests_synthetic_study"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("synthetic_study.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def synthetic():
    return load_synthetic()


def _build_wheel(folder: Path, name: str = "sweeper_probe", version: str = "0.1", value: int = 42) -> Path:
    """A pure-Python wheel with one module ``{name}`` holding ``VALUE = value`` (no build tool)."""
    import base64
    import hashlib
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VALUE = {value}\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    records = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        records.append(f"{path},sha256={digest},{len(text.encode())}")
    records.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(records) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="session")
def build_wheel():
    """``build_wheel(folder, name=..., version=..., value=...)`` -> a tiny local wheel."""
    return _build_wheel
