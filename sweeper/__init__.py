"""sweeper: a quality-gated parameter sweep orchestrator for LLM serving.

Kept light on purpose: the vLLM plugin and the CLI import this package, so
heavy modules (Optuna, pandas) are loaded only when their names are used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "run_study": "sweeper.study",
    "Manifest": "sweeper.manifest",
    "ServerProcess": "sweeper.serving",
    "Measurement": "sweeper.study",
    "TrialContext": "sweeper.study",
    "Evaluator": "sweeper.study",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'sweeper' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)


__all__ = ["__version__", *_LAZY]
