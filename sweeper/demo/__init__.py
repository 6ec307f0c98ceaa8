"""The bundled demo: a tiny Gemma 4 model with an MTP drafter, its manifests and data.

Everything here is package data built by ``scripts/build_tiny_model.py``.
``manifest`` serves the model on CPU (float32, eager, the CPU KV-cache
size); ``gpu_manifest`` serves the same files on a CUDA GPU (bfloat16,
compiled with CUDA graphs, 30 % of the GPU's memory, vLLM's sampler
without flashinfer). ``choose_demo_manifest`` picks the one that fits this
host: the GPU manifest where NVML sees a GPU, else the CPU one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweeper.devices import DeviceBackend

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoPaths:
    model: Path
    drafter: Path
    manifest: Path
    gpu_manifest: Path
    prompts_tuning: Path
    prompts_heldout: Path
    ppl_tuning: Path
    ppl_heldout: Path

    def as_dict(self) -> dict[str, str]:
        return {key: str(value) for key, value in dataclasses.asdict(self).items()}

    def missing(self) -> list[str]:
        return [key for key, value in dataclasses.asdict(self).items() if not Path(value).exists()]


def demo_paths() -> DemoPaths:
    return DemoPaths(
        model=DATA_DIR / "model",
        drafter=DATA_DIR / "drafter",
        manifest=DATA_DIR / "manifest.json",
        gpu_manifest=DATA_DIR / "manifest-gpu.json",
        prompts_tuning=DATA_DIR / "prompts_tuning.json",
        prompts_heldout=DATA_DIR / "prompts_heldout.json",
        ppl_tuning=DATA_DIR / "ppl_tuning.jsonl",
        ppl_heldout=DATA_DIR / "ppl_heldout.jsonl",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoChoice:
    """The demo manifest picked for this host, and why."""

    manifest: Path
    gpu: bool
    reason: str

    def describe(self) -> str:
        kind = "GPU" if self.gpu else "CPU"
        return f"demo: the {kind} manifest {self.manifest.name}, since {self.reason}"


def choose_demo_manifest(devices: Callable[[], DeviceBackend] | None = None) -> DemoChoice:
    """The GPU demo manifest where ``devices()`` (NVML by default) sees a GPU, else the CPU one.

    NVML answers in milliseconds and loads no CUDA; a host whose NVML is
    missing counts as a CPU host, and the logged reason names the GPU
    manifest for a user who knows better.
    """
    if devices is None:
        from sweeper.devices import open_devices as devices
    paths = demo_paths()
    with devices() as backend:
        ids = backend.device_ids()
        names = sorted({backend.name(device) for device in ids})
        no_gpu = getattr(backend, "reason", "no GPU is visible")
    if ids:
        choice = DemoChoice(
            manifest=paths.gpu_manifest, gpu=True, reason=f"NVML sees {len(ids)} GPU(s) ({', '.join(names)})"
        )
    else:
        choice = DemoChoice(
            manifest=paths.manifest,
            gpu=False,
            reason=f"{no_gpu}; on a CUDA machine without NVML pass --manifest {paths.gpu_manifest}",
        )
    logger.info("%s", choice.describe())
    return choice
