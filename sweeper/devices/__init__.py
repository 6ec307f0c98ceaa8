"""The GPUs of this host, behind a small interface.

``DeviceBackend`` is what sweeper reads of a GPU: the device ids, the
product name, used memory, the PIDs holding memory, the driver and CUDA
versions. ``NvmlDevices`` reads them through NVML (``nvidia-ml-py``,
imported only when used), ``NoDevices`` is a host without GPUs, and
``ScriptedDevices`` is a stand-in for tests on machines without a GPU
(scripted memory readings, PIDs holding memory). ``open_devices()`` picks
NVML when it works, else ``NoDevices``.

``DeviceSlot`` is one worker's share of them: the GPUs (and CPU cores) its
servers run on, the wait for free memory before each server start, and
the peak-memory sampler while one runs.
"""

from sweeper.devices._backend import DeviceBackend, NoDevices
from sweeper.devices._nvml import NvmlDevices, NvmlUnavailable, open_devices
from sweeper.devices._slot import (
    CPU_BIND_VARIABLE,
    CUDA_DEVICES_VARIABLE,
    DeviceSlot,
    MemorySampler,
    MemoryWait,
    describe_device,
)
from sweeper.devices._standin import ScriptedDevices, ScriptedGpu

__all__ = [
    "CPU_BIND_VARIABLE",
    "CUDA_DEVICES_VARIABLE",
    "DeviceBackend",
    "DeviceSlot",
    "MemorySampler",
    "MemoryWait",
    "NoDevices",
    "NvmlDevices",
    "NvmlUnavailable",
    "ScriptedDevices",
    "ScriptedGpu",
    "describe_device",
    "open_devices",
]
