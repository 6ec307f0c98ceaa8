"""Which demo manifest a host gets: the GPU one where NVML sees a GPU, else the CPU one."""

from __future__ import annotations

import logging

from sweeper.demo import choose_demo_manifest, demo_paths
from sweeper.devices import NoDevices, ScriptedDevices, ScriptedGpu


def test_a_host_with_a_gpu_gets_the_gpu_manifest_and_the_log_says_why(caplog) -> None:
    caplog.set_level(logging.INFO, logger="sweeper.demo")
    choice = choose_demo_manifest(lambda: ScriptedDevices([ScriptedGpu(name="NVIDIA H200")]))
    assert choice.gpu and choice.manifest == demo_paths().gpu_manifest
    assert "demo: the GPU manifest manifest-gpu.json, since NVML sees 1 GPU(s) (NVIDIA H200)" in caplog.text


def test_a_host_without_one_keeps_the_cpu_manifest_and_is_told_the_other(caplog) -> None:
    caplog.set_level(logging.INFO, logger="sweeper.demo")
    choice = choose_demo_manifest(lambda: NoDevices("NVML cannot start: no driver"))
    assert not choice.gpu and choice.manifest == demo_paths().manifest
    assert choice.reason.startswith("NVML cannot start: no driver; on a CUDA machine without NVML pass")
    assert str(demo_paths().gpu_manifest) in caplog.text
