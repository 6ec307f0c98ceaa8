"""Shared fixtures for the benchmark scripts' tests: a module of the ``benchmarks`` package, loaded."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
BENCHMARKS = REPOSITORY / "benchmarks"


def _load_benchmark(script: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks.<script>``, as ``python -m benchmarks.<script>`` would import it; with
    ``module_name``, a copy of its own executed afresh under that name (for a test that changes it).

    The repository goes on ``sys.path`` first where it is not there yet (``pytest`` run without
    ``python -m``), so that the package and the scripts' own ``from benchmarks import ...`` resolve;
    a copy is registered before it runs, as its dataclasses need.
    """
    if str(REPOSITORY) not in sys.path:
        sys.path.insert(0, str(REPOSITORY))
    if module_name is None:
        return importlib.import_module(f"benchmarks.{script}")
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[..., ModuleType]:
    return _load_benchmark
