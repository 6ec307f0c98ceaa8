"""DeviceSlot: the GPU-memory wait before a server start, the stop of sweeper servers
holding a GPU, the failure when memory stays taken, and the peak sampler.

The GPUs are ``ScriptedDevices``, the stand-in for NVML (a CPU machine has
no GPU memory to hold); the processes holding that memory are real ones
(``sleep``), so the stop goes through the real ``/proc`` scan and signals.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from sweeper.devices import DeviceSlot, MemoryWait, NoDevices, ScriptedDevices, ScriptedGpu
from sweeper.devices._slot import _token_processes
from sweeper.errors import ServerError, UserInputError

FAST = MemoryWait(tolerance_mib=256, timeout_s=0.6, after_stop_s=3.0, poll_s=0.05, sample_s=0.02)


@pytest.fixture
def processes():
    """Start ``sleep`` processes with given env entries; all are killed at the end.

    ``processes.mine()`` is the slot's view of sweeper servers limited to these
    processes: the real /proc scan, so that the test never stops a server of
    another test running on this machine at the same time.
    """
    started: list[subprocess.Popen] = []

    def start(**env: str) -> subprocess.Popen:
        process = subprocess.Popen(["sleep", "300"], env={**os.environ, **env}, start_new_session=True)
        started.append(process)
        return process

    def mine() -> dict:
        pids = {process.pid for process in started}
        return {pid: seen for pid, seen in _token_processes().items() if pid in pids}

    start.mine = mine
    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def _alive(process: subprocess.Popen) -> bool:
    return process.poll() is None


def test_wait_returns_once_memory_is_back_near_idle() -> None:
    # a server that lets go of its memory over three reads: 6000, 3000, then 200 MiB above idle
    gpu = ScriptedGpu(idle_mib=500, readings=[0, 6000, 3000, 200])
    devices = ScriptedDevices({"0": gpu})
    slot = DeviceSlot(devices, gpus=["0"], wait=FAST)
    assert slot.idle == {"0": 500}
    began = time.monotonic()
    slot.wait_until_free()
    # idle read once at start, then 6000, 3000 and 200 (within the 256 MiB tolerance)
    assert devices.reads == ["0"] * 4
    assert time.monotonic() - began < FAST.timeout_s


def test_memory_of_a_dead_sweeper_server_is_freed_by_stopping_it(processes) -> None:
    ours = processes(SWEEPER_SERVER_TOKEN="left-behind")
    # a live sweeper server of another worker, on another GPU: must survive
    other = processes(SWEEPER_SERVER_TOKEN="other-worker", CUDA_VISIBLE_DEVICES="1")
    gpus = {
        "0": ScriptedGpu(idle_mib=100),
        "1": ScriptedGpu(idle_mib=100, holders={other.pid: 30_000}),
    }
    slot = DeviceSlot(ScriptedDevices(gpus), gpus=["0"], wait=FAST, token_processes=processes.mine)
    gpus["0"].holders[ours.pid] = 20_000  # the server of a killed sweeper still holds GPU 0
    slot.wait_until_free()
    ours.wait(timeout=15)
    assert not _alive(ours)
    assert _alive(other)


def test_a_sweeper_server_is_found_by_its_cuda_visible_devices(processes) -> None:
    # the driver lists no PIDs (as NVML inside a container may): the server's env names GPU 2
    server = processes(SWEEPER_SERVER_TOKEN="t2", CUDA_VISIBLE_DEVICES="2,3")
    stranger = processes(SWEEPER_SERVER_TOKEN="t0", CUDA_VISIBLE_DEVICES="0")
    gpu = ScriptedGpu(idle_mib=0)
    slot = DeviceSlot(ScriptedDevices({"2": gpu}), gpus=["2"], wait=FAST, token_processes=processes.mine)
    gpu.readings = [9000]  # held for good: stopping the server does not free it
    with pytest.raises(ServerError) as caught:
        slot.wait_until_free()
    server.wait(timeout=15)
    assert not _alive(server)
    assert _alive(stranger)
    message = str(caught.value)
    assert message.startswith("GPU memory still held by PIDs (none listed by the driver) on GPU 2")
    assert "9000 MiB in use, 0 MiB when the worker started (tolerance 256 MiB)" in message
    assert f"stopping sweeper server PIDs {server.pid}" in message


def test_memory_held_by_another_program_fails_the_start_and_kills_nothing(processes) -> None:
    foreign = processes()  # no sweeper token: not ours to stop
    gpu = ScriptedGpu(idle_mib=1000)
    slot = DeviceSlot(ScriptedDevices({"0": gpu}), gpus=["0"], wait=FAST, token_processes=processes.mine)
    gpu.holders[foreign.pid] = 5000
    began = time.monotonic()
    with pytest.raises(ServerError) as caught:
        slot.wait_until_free()
    waited = time.monotonic() - began
    assert FAST.timeout_s <= waited < FAST.timeout_s + FAST.after_stop_s
    assert _alive(foreign)
    assert str(caught.value).startswith(
        f"GPU memory still held by PIDs {foreign.pid} on GPU 0: 6000 MiB in use, 1000 MiB when the worker started"
    )
    assert "no sweeper server holds it" in str(caught.value)


def test_a_lower_reading_lowers_the_idle_figure() -> None:
    # the worker started while something still held 4000 MiB; later reads show 300
    gpu = ScriptedGpu(idle_mib=300, readings=[4000, 0])
    slot = DeviceSlot(ScriptedDevices({"0": gpu}), gpus=["0"], wait=FAST, token_processes=dict)
    assert slot.idle == {"0": 4300}
    slot.wait_until_free()
    assert slot.idle == {"0": 300}
    gpu.readings = [1000]  # 1000 above the true idle, over the tolerance
    with pytest.raises(ServerError, match="1300 MiB in use, 300 MiB"):
        slot.wait_until_free()


def test_sampler_keeps_the_peak_of_each_gpu() -> None:
    gpus = {"0": ScriptedGpu(idle_mib=10), "1": ScriptedGpu(idle_mib=20)}
    slot = DeviceSlot(ScriptedDevices(gpus), gpus=["0", "1"], wait=FAST)
    gpus["0"].readings = [100, 900, 400]
    gpus["1"].readings = [50, 70]
    with slot.watch() as sampler:
        deadline = time.monotonic() + 5
        while sampler.samples < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sampler.samples >= 4
    assert sampler.peak_mib == {"0": 910, "1": 90}
    assert sampler.peak == 910


def test_server_env_describe_and_versions() -> None:
    devices = ScriptedDevices(
        {"0": ScriptedGpu(name="Stand-in A"), "1": ScriptedGpu(name="Stand-in A")},
        driver="580.1",
        cuda="13.0",
    )
    slot = DeviceSlot(devices, gpus=["0", "1"], cpus="1")
    assert slot.server_env() == {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert slot.describe() == {"devices": "stand-in", "gpus": "0,1", "cpus": "1"}
    assert slot.versions() == {
        "gpu": "Stand-in A",
        "gpu_count": "2",
        "nvidia_driver": "580.1",
        "cuda_driver": "13.0",
    }
    watching = DeviceSlot(devices, gpus=["1"], set_visible=False)
    assert watching.server_env() == {}
    assert watching.watched == ("1",)


def test_no_gpu_host_sets_the_variables_and_waits_for_nothing() -> None:
    slot = DeviceSlot(NoDevices("no NVML here"), gpus=["0"], cpus="0")
    assert slot.watched == ()
    assert slot.server_env() == {"CUDA_VISIBLE_DEVICES": "0", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    slot.wait_until_free()  # returns at once
    assert slot.versions() == {}
    with slot.watch() as sampler:
        pass
    assert sampler.peak is None


def test_unknown_gpu_is_a_user_error() -> None:
    with pytest.raises(UserInputError, match=r"--gpus: no GPU '7' .*\(this host has 0, 1\)"):
        DeviceSlot(ScriptedDevices([ScriptedGpu(), ScriptedGpu()]), gpus=["7"])


@pytest.mark.parametrize("field, value", [("tolerance_mib", -1), ("timeout_s", 0), ("poll_s", -0.1), ("sample_s", 0)])
def test_memory_wait_validates_itself(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"MemoryWait.{field}"):
        MemoryWait(**{field: value})
