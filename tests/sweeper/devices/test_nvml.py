"""NvmlDevices on a real GPU; skipped where NVML (the package or the driver) is missing."""

from __future__ import annotations

import pytest

from sweeper.devices import NoDevices, NvmlDevices, NvmlUnavailable, open_devices


@pytest.fixture
def nvml():
    try:
        devices = NvmlDevices()
    except NvmlUnavailable as exc:
        pytest.skip(f"NVML is not available here: {exc}")
    with devices:
        yield devices


def test_nvml_reads_every_gpu(nvml: NvmlDevices) -> None:
    import pynvml

    ids = nvml.device_ids()
    assert ids == tuple(str(i) for i in range(pynvml.nvmlDeviceGetCount()))
    for device in ids:
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(device))
        assert nvml.name(device) == pynvml.nvmlDeviceGetName(handle)
        total = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20
        assert 0 <= nvml.used_memory_mib(device) <= total
        assert all(pid > 0 for pid in nvml.pids(device))
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        assert nvml.name(uuid) == nvml.name(device)  # a UUID names the same GPU
    assert nvml.driver_version() == pynvml.nvmlSystemGetDriverVersion()
    major, minor = nvml.cuda_version().split(".")
    assert int(major) * 1000 + int(minor) * 10 == pynvml.nvmlSystemGetCudaDriverVersion()


def test_unknown_gpu_is_a_key_error(nvml: NvmlDevices) -> None:
    with pytest.raises(KeyError):
        nvml.used_memory_mib(str(len(nvml.device_ids()) + 7))


def test_open_devices_falls_back_to_no_devices() -> None:
    try:
        NvmlDevices().close()
        usable = True
    except NvmlUnavailable:
        usable = False
    backend = open_devices()
    assert isinstance(backend, NoDevices) != usable or not backend.device_ids()
