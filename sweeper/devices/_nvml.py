"""NvmlDevices: the GPUs read through NVML (the ``nvidia-ml-py`` package, module ``pynvml``).

``pynvml`` is imported when an ``NvmlDevices`` is made, so sweeper runs
without it (``pip install 'sweeper-serving[gpu]'`` brings it). NVML counts and
indexes every GPU of the host; it does not read ``CUDA_VISIBLE_DEVICES``.
Inside a container NVML reports host PIDs, which may not match the
container's: ``pids`` is then of little use and sweeper falls back on the
``CUDA_VISIBLE_DEVICES`` of its own servers (see ``DeviceSlot``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sweeper.devices._backend import DeviceBackend, NoDevices

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: the package or the driver's library is missing."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlDevices(DeviceBackend):
    """The host's GPUs through NVML; one ``nvmlInit`` per instance, ``close`` shuts it down."""

    kind = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(
                f"the nvidia-ml-py package is not installed ({exc}); pip install 'sweeper-serving[gpu]'"
            ) from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML cannot start: {exc}") from None
        self._lock = threading.Lock()  # the sampler thread and the worker share the handles
        self._handles: dict[str, Any] = {}
        self._open = True

    def _handle(self, device: str) -> Any:
        handle = self._handles.get(device)
        if handle is None:
            nvml = self._nvml
            try:
                if device.isdigit():
                    handle = nvml.nvmlDeviceGetHandleByIndex(int(device))
                else:
                    handle = nvml.nvmlDeviceGetHandleByUUID(device)
            except nvml.NVMLError as exc:
                raise KeyError(f"no GPU {device!r} on this host: {exc}") from None
            self._handles[device] = handle
        return handle

    def device_ids(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(str(i) for i in range(self._nvml.nvmlDeviceGetCount()))

    def name(self, device: str) -> str:
        with self._lock:
            return _text(self._nvml.nvmlDeviceGetName(self._handle(device)))

    def used_memory_mib(self, device: str) -> float:
        with self._lock:
            return self._nvml.nvmlDeviceGetMemoryInfo(self._handle(device)).used / MIB

    def pids(self, device: str) -> tuple[int, ...]:
        nvml = self._nvml
        found: set[int] = set()
        with self._lock:
            handle = self._handle(device)
            for query in (
                nvml.nvmlDeviceGetComputeRunningProcesses,
                nvml.nvmlDeviceGetGraphicsRunningProcesses,
            ):
                try:
                    found.update(int(info.pid) for info in query(handle))
                except nvml.NVMLError as exc:
                    logger.debug("NVML cannot list processes on GPU %s: %s", device, exc)
        return tuple(sorted(found))

    def driver_version(self) -> str | None:
        with self._lock:
            try:
                return _text(self._nvml.nvmlSystemGetDriverVersion())
            except self._nvml.NVMLError:
                return None

    def cuda_version(self) -> str | None:
        with self._lock:
            try:
                version = int(self._nvml.nvmlSystemGetCudaDriverVersion())
            except self._nvml.NVMLError:
                return None
        return f"{version // 1000}.{version % 1000 // 10}"  # 13000 -> "13.0"

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                logger.debug("nvmlShutdown: %s", exc)


def open_devices() -> DeviceBackend:
    """NVML when its library loads and finds a GPU, else ``NoDevices`` (the reason logged)."""
    try:
        backend = NvmlDevices()
    except NvmlUnavailable as exc:
        logger.info("GPU memory is not watched: %s", exc)
        return NoDevices(str(exc))
    if not backend.device_ids():
        backend.close()
        logger.info("GPU memory is not watched: NVML finds no GPU")
        return NoDevices("NVML finds no GPU")
    return backend
