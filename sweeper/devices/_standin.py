"""ScriptedDevices: a STAND-IN for NVML, for tests on machines without a GPU.

It stands in for the one thing a CPU machine cannot produce: a GPU whose
memory is held by processes. Each scripted GPU has a name, an idle figure,
and what holds memory on top of it:

* ``holders``: PID -> MiB, counted while that PID is alive (checked with
  ``os.kill(pid, 0)``), so a test can start a real process, say that it
  holds memory, and see the memory "free" when sweeper stops that process;
* ``readings``: extra MiB for the next reads, one per read, the last one
  repeated (a server that is slow to let go of its memory).

Every call is counted in ``reads`` so that tests can tell how often and
when the GPUs were looked at. Nothing here talks to a driver.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping, Sequence

from sweeper.devices._backend import DeviceBackend


@dataclasses.dataclass(kw_only=True)
class ScriptedGpu:
    """One stand-in GPU (mutable on purpose: a test changes it while sweeper watches)."""

    name: str = "Stand-in GPU (no real device)"
    idle_mib: float = 0.0
    holders: dict[int, float] = dataclasses.field(default_factory=dict)
    readings: list[float] = dataclasses.field(default_factory=list)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has let go of everything
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class ScriptedDevices(DeviceBackend):
    """A stand-in for ``NvmlDevices``: scripted GPUs, their memory and the PIDs holding it."""

    kind = "stand-in"

    def __init__(
        self,
        gpus: Mapping[str, ScriptedGpu] | Sequence[ScriptedGpu],
        *,
        driver: str = "stand-in driver",
        cuda: str = "0.0",
    ) -> None:
        if not isinstance(gpus, Mapping):
            gpus = {str(i): gpu for i, gpu in enumerate(gpus)}
        self.gpus = dict(gpus)
        self.driver = driver
        self.cuda = cuda
        self.reads: list[str] = []
        self._lock = threading.Lock()

    def _gpu(self, device: str) -> ScriptedGpu:
        try:
            return self.gpus[device]
        except KeyError:
            raise KeyError(f"no GPU {device!r} among the stand-in's {sorted(self.gpus)}") from None

    def device_ids(self) -> tuple[str, ...]:
        return tuple(self.gpus)

    def name(self, device: str) -> str:
        return self._gpu(device).name

    def used_memory_mib(self, device: str) -> float:
        with self._lock:
            gpu = self._gpu(device)
            self.reads.append(device)
            extra = 0.0
            if gpu.readings:
                extra = gpu.readings.pop(0) if len(gpu.readings) > 1 else gpu.readings[0]
            held = sum(mib for pid, mib in gpu.holders.items() if _alive(pid))
            return gpu.idle_mib + extra + held

    def pids(self, device: str) -> tuple[int, ...]:
        gpu = self._gpu(device)
        return tuple(sorted(pid for pid in gpu.holders if _alive(pid)))

    def driver_version(self) -> str | None:
        return self.driver

    def cuda_version(self) -> str | None:
        return self.cuda
