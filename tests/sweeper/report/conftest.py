"""Fixtures of the report's tests: a stored study shaped like the CPU demo's (see demo_like.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _load_demo_like():
    """tests/sweeper/report/demo_like.py as a module (the tests are not a package)."""
    name = "sweeper_tests_report_demo_like"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("demo_like.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def demo_like():
    return _load_demo_like()
