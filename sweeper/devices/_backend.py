"""DeviceBackend: what sweeper reads of a host's GPUs, and the no-GPU backend (``open_devices`` picks one)."""

from __future__ import annotations

import abc
import logging

logger = logging.getLogger(__name__)


class DeviceBackend(abc.ABC):
    """The GPUs of this host as sweeper sees them.

    A device id is the text that names one GPU in ``CUDA_VISIBLE_DEVICES``:
    its index on the host (``"0"``) or its UUID (``"GPU-..."``, ``"MIG-..."``).
    Indexes are the host's (NVML's), whatever ``CUDA_VISIBLE_DEVICES`` this
    process itself has. Memory figures are MiB.
    """

    kind: str = "?"

    @abc.abstractmethod
    def device_ids(self) -> tuple[str, ...]:
        """Every GPU of the host, by index."""

    @abc.abstractmethod
    def name(self, device: str) -> str:
        """The GPU's product name (``"NVIDIA H200"``)."""

    @abc.abstractmethod
    def used_memory_mib(self, device: str) -> float:
        """Memory in use on the GPU now, by every process."""

    @abc.abstractmethod
    def pids(self, device: str) -> tuple[int, ...]:
        """Processes holding memory on the GPU (may be empty where the driver cannot tell)."""

    @abc.abstractmethod
    def driver_version(self) -> str | None:
        """The kernel driver's version (``"580.65.06"``)."""

    @abc.abstractmethod
    def cuda_version(self) -> str | None:
        """The highest CUDA version the driver supports (``"13.0"``)."""

    def close(self) -> None:  # noqa: B027 - a hook with nothing to release by default
        """Release what the backend holds (nothing by default)."""

    def __enter__(self) -> DeviceBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NoDevices(DeviceBackend):
    """A host without GPUs (or without NVML): nothing to watch, nothing to wait for."""

    kind = "none"

    def __init__(self, reason: str = "no GPU") -> None:
        self.reason = reason

    def device_ids(self) -> tuple[str, ...]:
        return ()

    def name(self, device: str) -> str:
        raise KeyError(f"no GPU {device!r}: {self.reason}")

    def used_memory_mib(self, device: str) -> float:
        raise KeyError(f"no GPU {device!r}: {self.reason}")

    def pids(self, device: str) -> tuple[int, ...]:
        return ()

    def driver_version(self) -> str | None:
        return None

    def cuda_version(self) -> str | None:
        return None
