"""Shared fixtures for the benchmark scripts' tests: a script under ``benchmarks/`` loaded as a module."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load_benchmark(script: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<script>.py`` executed as the module ``module_name`` (default: the script's name).

    The folder goes on ``sys.path`` first, so the script's own ``import parity`` and the like
    resolve; the module is registered before it runs, as its dataclasses need.
    """
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(module_name or script, BENCHMARKS / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[..., ModuleType]:
    return _load_benchmark
