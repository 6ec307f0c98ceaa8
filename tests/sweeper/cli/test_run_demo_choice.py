"""`sweeper run` with no --manifest: the demo on the GPU manifest where a GPU is seen, else on CPU.

The device layer is injected (a stand-in GPU, or none) and ``prepare`` is stopped with an
error of the test's own, so the test sees the plan the command built without starting a
server (and, that error being no user error, the log lines held while the input was checked).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sweeper.cli import run_cmd
from sweeper.demo import demo_paths
from sweeper.devices import NoDevices, ScriptedDevices, ScriptedGpu
from sweeper.sweep import DEMO_SIZES, DEMO_TRIALS, GPU_DEMO_NOISE, prepare


class Stopped(Exception):
    """Raised in place of ``prepare``."""


@pytest.fixture
def planned(monkeypatch):
    plans = []

    def stop(plan):
        plans.append(plan)
        raise Stopped("stopped before any server")

    monkeypatch.setattr(run_cmd, "prepare", stop)
    return plans


def invoke(monkeypatch, devices, *args: str):
    monkeypatch.setattr(run_cmd, "open_devices", devices)
    return CliRunner().invoke(run_cmd.command, ["--plain", *args])


def test_with_a_gpu_the_demo_runs_its_gpu_manifest_at_the_demo_sizes(monkeypatch, planned, caplog) -> None:
    caplog.set_level("INFO", logger="sweeper.demo")
    result = invoke(monkeypatch, lambda: ScriptedDevices([ScriptedGpu(name="NVIDIA H200")]), "--num-prompts", "4")
    assert isinstance(result.exception, Stopped)
    plan = planned[0]
    demo = demo_paths()
    assert plan.manifest == str(demo.gpu_manifest)
    assert (plan.prompts, plan.ppl_data) == (str(demo.prompts_tuning), str(demo.ppl_tuning))
    sizes = plan.sizes
    assert (sizes.num_prompts, sizes.output_len, sizes.warmup_requests) == (
        4,
        DEMO_SIZES.output_len,
        DEMO_SIZES.warmup_requests,
    )
    assert plan.trial_budget == DEMO_TRIALS
    # the GPU's measured between-server spread is the races' prior (docs/gpu.md)
    assert plan.confirm_settings().noise == GPU_DEMO_NOISE == 0.13
    assert "demo: the GPU manifest manifest-gpu.json, since NVML sees 1 GPU(s) (NVIDIA H200)" in caplog.text


def test_the_gpu_demo_plan_passes_the_real_checks(monkeypatch, planned) -> None:
    invoke(monkeypatch, lambda: ScriptedDevices([ScriptedGpu()]))
    prepared = prepare(planned[0])  # manifest, space, tuning and bundled held-out data all check out
    assert prepared.study_name == "tiny-gemma4-demo-gpu-tiny-cpu"
    assert prepared.recipe.heldout_prompts == str(demo_paths().prompts_heldout)


def test_without_a_gpu_the_demo_stays_the_cpu_one(monkeypatch, planned) -> None:
    invoke(monkeypatch, lambda: NoDevices("NVML finds no GPU"))
    assert planned[0].manifest is None and planned[0].demo


def test_a_manifest_given_is_never_replaced(monkeypatch, planned) -> None:
    def no_lookup():
        raise AssertionError("no device lookup when --manifest is given")

    invoke(monkeypatch, no_lookup, "--manifest", str(demo_paths().manifest), "--prompts", "p", "--ppl-data", "d")
    assert planned[0].manifest == str(demo_paths().manifest)
