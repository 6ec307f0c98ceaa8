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
