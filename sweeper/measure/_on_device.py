"""DeviceHooks: a trial's servers on a worker's GPUs (wait for free memory, sample the peak).

``ServerEvaluator(..., device=slot)`` wraps its hooks in ``DeviceHooks``:
before each server starts (``server_created``) the slot waits until its
GPUs' memory is back near idle (a ``ServerError`` fails the trial when it
is not), a sampler reads the memory while the server runs, and
``provenance`` adds what was seen to the trial's measurement: the GPUs, the
peak memory, the GPU name and the driver and CUDA versions.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sweeper.devices import DeviceSlot, MemorySampler
from sweeper.measure._evaluate import ServerHooks
from sweeper.serving import ServerProcess
from sweeper.study import Measurement

logger = logging.getLogger(__name__)


class DeviceHooks(ServerHooks):
    """Around another ``ServerHooks``: the memory wait before each start, sampling while it runs."""

    def __init__(self, slot: DeviceSlot, inner: ServerHooks) -> None:
        self.slot = slot
        self.inner = inner
        self.peaks: dict[str, float] = {}
        self._sampler: MemorySampler | None = None

    def server_created(self, server: ServerProcess) -> None:
        self.slot.wait_until_free()  # raises ServerError: the trial fails before any start
        self.inner.server_created(server)
        self._sampler = self.slot.sampler().start()

    def phase_ended(self, phase: str, seconds: float) -> None:
        self.inner.phase_ended(phase, seconds)

    def server_stopped(self, server: ServerProcess) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            for device, mib in self._sampler.peak_mib.items():
                self.peaks[device] = max(self.peaks.get(device, mib), mib)
            self._sampler = None
        self.inner.server_stopped(server)

    def extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = dict(self.slot.describe())
        extras.pop("devices", None)
        if self.peaks:
            extras["gpu_peak_memory_mib"] = round(max(self.peaks.values()), 1)
        return extras

    def provenance(self, measurement: Measurement) -> Measurement:
        """The measurement with the GPUs, their peak memory and versions added."""
        return dataclasses.replace(
            measurement,
            extras={**measurement.extras, **self.extras()},
            versions={**measurement.versions, **self.slot.versions()},
        )
