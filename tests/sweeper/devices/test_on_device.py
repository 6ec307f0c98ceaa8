"""A trial's servers on a worker's GPUs: the wait before the start fails a trial without
starting a server, the peak and versions reach the measurement, and export writes them.

GPUs are the ``ScriptedDevices`` stand-in (there is no GPU here); the
evaluator, the study, verification and export are the real ones.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from search_spaces import load_preset
from storage import TrialStore
from sweeper.answer import VerifySettings, export_answer, verify_study
from sweeper.devices import DeviceSlot, MemoryWait, ScriptedDevices, ScriptedGpu
from sweeper.errors import ServerError
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, ServerEvaluator, ServerHooks
from sweeper.measure._on_device import DeviceHooks
from sweeper.study import Measurement, PplGate, StudyOptions, run_study
from sweeper.versions import software_versions

FAST = MemoryWait(tolerance_mib=100, timeout_s=0.3, after_stop_s=0.3, poll_s=0.05, sample_s=0.02)


class RecordingHooks(ServerHooks):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def server_created(self, server) -> None:
        self.calls.append(f"created {server.token}")

    def phase_ended(self, phase: str, seconds: float) -> None:
        self.calls.append(f"phase {phase}")

    def server_stopped(self, server) -> None:
        self.calls.append(f"stopped {server.token}")


def wait_for_samples(hooks: DeviceHooks, count: int) -> None:
    deadline = time.monotonic() + 10
    while hooks._sampler.samples < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hooks._sampler.samples >= count


def h200_slot(**gpu) -> tuple[DeviceSlot, ScriptedGpu]:
    card = ScriptedGpu(name="Stand-in H200", idle_mib=500, **gpu)
    devices = ScriptedDevices({"3": card}, driver="580.65.06", cuda="13.0")
    # no sweeper server of this machine is in the slot's view: tests must not stop
    # the real servers of other tests running at the same time
    return DeviceSlot(devices, gpus=["3"], wait=FAST, token_processes=dict), card


def test_device_hooks_wrap_the_inner_hooks_and_add_provenance() -> None:
    slot, card = h200_slot()
    inner = RecordingHooks()
    hooks = DeviceHooks(slot, inner)
    server = SimpleNamespace(token="tok")
    hooks.server_created(server)
    card.readings = [43_000, 30_000]  # the server's memory while it runs
    wait_for_samples(hooks, 3)
    hooks.phase_ended("ready", 1.0)
    hooks.server_stopped(server)
    assert inner.calls == ["created tok", "phase ready", "stopped tok"]
    measured = hooks.provenance(Measurement(tps=10.0, ppl=2.0, extras={"completed": 8}, versions={"vllm": "0.26.0"}))
    assert measured.extras == {"completed": 8, "gpus": "3", "gpu_peak_memory_mib": 43_500.0}
    assert measured.versions == {
        "vllm": "0.26.0",
        "gpu": "Stand-in H200",
        "gpu_count": "1",
        "nvidia_driver": "580.65.06",
        "cuda_driver": "13.0",
    }


def test_held_gpu_memory_fails_the_trial_before_any_server_starts(demo, tmp_path: Path) -> None:
    foreign = subprocess.Popen(["sleep", "300"])
    try:
        slot, card = h200_slot()
        card.holders[foreign.pid] = 20_000
        settings = EvalSettings(ppl=None, tps=None)
        evaluator = ServerEvaluator(Manifest.load(demo.manifest), settings, run_dir=tmp_path, device=slot)
        context = SimpleNamespace(
            number=7,
            role="sampled",
            overrides={},
            known_ppl=None,
            ppl_cap=None,
            stored={},
            set_manifest=lambda m: None,
            set_server_token=lambda t: None,
            set_log_tail=lambda t: None,
            record_phase=lambda n, s: None,
            notify_phase=lambda *a: None,
            notify_progress=lambda *a: None,
        )
        context.set_device = lambda device: context.stored.update(device=device)
        with pytest.raises(ServerError, match=f"GPU memory still held by PIDs {foreign.pid} on GPU 3"):
            evaluator({}, context)
        assert context.stored == {"device": {"devices": "stand-in", "gpus": "3"}}
        assert not (tmp_path / "trial-0007" / "server.log").exists()  # no server was started
    finally:
        foreign.kill()
        foreign.wait()


def test_export_writes_what_the_winner_was_measured_on(synthetic, demo, tmp_path: Path) -> None:
    slot, card = h200_slot()
    plain = synthetic.synthetic_evaluator()

    def evaluate(params, context):
        hooks = DeviceHooks(slot, ServerHooks())
        server = SimpleNamespace(token="t")
        hooks.server_created(server)
        card.readings = [41_000]
        wait_for_samples(hooks, 2)
        hooks.server_stopped(server)
        card.readings = [0]
        return hooks.provenance(plain(params, context))

    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = load_preset("tiny-cpu").bind(Manifest.load(demo.manifest).env)
    run_study(
        space,
        evaluate,
        StudyOptions(
            study_name="on-gpu",
            storage=url,
            n_trials=3,
            gate=PplGate(cap=synthetic.CAP),
            sampler="random",
            seed=0,
            enqueue=list(synthetic.CONFIGS.values())[:2],
            handle_signals=False,
        ),
    )
    record = TrialStore(url).records("on-gpu", states=["complete"])[0]
    assert record.extras["gpu_peak_memory_mib"] == 41_500.0
    assert record.versions["gpu"] == "Stand-in H200"
    verify_study(VerifySettings(top=1, repeats=1, evaluate=plain), storage=url, study_name="on-gpu")
    out = tmp_path / "winner.json"
    export_answer(storage=url, study_name="on-gpu", output=out, base_manifest=Manifest.load(demo.manifest))
    description = json.loads(out.read_text())["description"]
    vllm = software_versions().get("vllm")
    expected = "Measured on Stand-in H200 x1, driver 580.65.06, CUDA 13.0, "
    expected += f"vLLM {vllm}, " if vllm else ""
    assert expected + "peak GPU memory 41500 MiB." in description
