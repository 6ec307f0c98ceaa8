"""Which demo manifest fits this host: ``choose_demo_manifest`` (the GPU one where NVML sees a GPU)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sweeper.demo._paths import demo_paths

if TYPE_CHECKING:
    from sweeper.devices import DeviceBackend

logger = logging.getLogger(__name__)


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
        from sweeper.devices import open_devices

        devices = open_devices
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
