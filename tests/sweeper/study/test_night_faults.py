"""The night's safety nets: a trial limit, start retries, refusals, a failed baseline.

The servers here are ``tests/sweeper/serving/fake_server.py``: a stand-in
HTTP server, not vLLM, that fails on demand the ways a real one does on a
GPU (out of memory at start while the last server's memory is still held,
a hang, a validation error) but cannot be made to on a CPU machine. The
study, the server evaluator, ServerProcess and the SQLite file are the real
ones. The real vLLM refusal is in ``test_refusal_vllm.py``.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import toy

import sweeper
from evaluators import PplSettings, TpsSettings, WarmupSettings
from storage import TrialStore
from sweeper.demo import demo_paths
from sweeper.errors import ServerStartError, StudyError
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, ServerEvaluator, load_eval_data
from sweeper.serving import TOKEN_VARIABLE, processes
from sweeper.study import Measurement, PplGate, StudyOptions

FAKE_SERVER = Path(__file__).resolve().parents[1] / "serving" / "fake_server.py"


def fake_manifest(tmp_path: Path, mode: str, **env: str) -> Manifest:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    path = tmp_path / "manifest.json"
    path.write_text(
        json.dumps(
            {
                "name": "fake",
                "served_model_name": "fake",
                "serve": ["python", str(FAKE_SERVER)],
                "env": {"FAKE_MODE": mode, "FAKE_STATE_DIR": str(state), **env},
            }
        )
    )
    return Manifest.load(path)


def settings() -> EvalSettings:
    demo = demo_paths()
    return EvalSettings(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        tps=TpsSettings(num_prompts=2, output_len=8, warmup_requests=0),
        ppl=PplSettings(max_records=4),
        warmup=WarmupSettings(num_prompts=2),
        ready_timeout_s=30,
    )


def evaluator(tmp_path: Path, manifest: Manifest, demo_manifest: Manifest, **kw) -> ServerEvaluator:
    # the data is the demo's (token ids that fit any 1024-token vocabulary), checked once
    data = load_eval_data(demo_manifest, settings())
    return ServerEvaluator(manifest, settings(), run_dir=tmp_path / "runs", data=data, **kw)


def run(tmp_path: Path, evaluate, **kw):
    fields: dict[str, Any] = dict(
        study_name="night",
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        n_trials=1,
        gate=PplGate(cap=10.0),
        sampler="random",
        seed=0,
        handle_signals=False,
    )
    fields.update(kw)
    return sweeper.run_study(toy.SPACE, evaluate, StudyOptions(**fields))


def optuna_trials(tmp_path: Path):
    return optuna.load_study(study_name="night", storage=f"sqlite:///{tmp_path / 'study.db'}").trials


def test_trial_limit_is_derived_from_the_sizes(tmp_path: Path, demo_manifest: Manifest):
    evaluate = evaluator(tmp_path, fake_manifest(tmp_path, "ok"), demo_manifest)
    assert evaluate.data.ppl_records is not None
    records = list(evaluate.data.ppl_records)[:4]
    expected = (
        2 * (30 + 90)  # start and teardown, twice (a start may be retried)
        + sum(2 + len(r.token_ids) / 2000 for r in records)  # PPL records
        + 2 * (2 + 1 / 20)  # warm-up bridge, max_tokens 1
        + 2 * (2 + 8 / 20)  # TPS requests, output_len 8
    )
    assert evaluate.trial_timeout_s == pytest.approx(expected)


def test_a_healthy_stand_in_measures(tmp_path: Path, demo_manifest: Manifest):
    result = run(tmp_path, evaluator(tmp_path, fake_manifest(tmp_path, "ok"), demo_manifest))
    record = result.status.trials[0]
    assert record.state == "complete" and record.ppl == pytest.approx(math.exp(0.5))
    assert record.tps > 0 and record.extras["completed"] == 2
    assert "start_attempts" not in record.extras


def test_a_hung_server_is_ended_by_the_trial_limit(tmp_path: Path, demo_manifest: Manifest):
    """Stand-in: a server that answers /v1/models, then never answers a request (its
    request timeouts, 30 s and more, are longer than the 8 s trial limit set here)."""
    evaluate = evaluator(tmp_path, fake_manifest(tmp_path, "hang-requests"), demo_manifest)
    began = time.monotonic()
    result = run(tmp_path, evaluate, trial_timeout_s=8.0, n_trials=2, max_consecutive_failures=5)
    elapsed = time.monotonic() - began
    assert elapsed < 50  # two trials of 8 s plus their stops, not 2 x 30 s request timeouts
    records = result.status.trials
    assert [(r.state, r.error_kind) for r in records] == [("failed", "timeout")] * 2
    assert "ran past its 8 s limit" in records[0].error_message
    assert re.search(r"its server was stopped \(\d process\(es\)\)", records[0].error_message)
    for record in records:
        assert processes.pids_with_env(TOKEN_VARIABLE, record.server_token) == []
    assert [t.state for t in optuna_trials(tmp_path)] == [optuna.trial.TrialState.FAIL] * 2


def test_a_transient_start_failure_is_retried_once(tmp_path: Path, demo_manifest: Manifest):
    """Stand-in: the first start runs out of GPU memory (the previous server's memory
    not yet free); the retry, after the device seam ``before_retry``, serves."""
    waited = []
    evaluate = evaluator(
        tmp_path,
        fake_manifest(tmp_path, "oom-once"),
        demo_manifest,
        before_retry=lambda: waited.append(time.monotonic()),
    )
    result = run(tmp_path, evaluate)
    record = TrialStore(f"sqlite:///{tmp_path / 'study.db'}").record("night", 0)
    assert result.status.counts["COMPLETE"] == 1 and len(waited) == 1
    assert record.state == "complete" and record.tps is not None and record.tps > 0
    assert record.extras["start_attempts"] == 2
    assert record.extras["first_start_failure"].startswith("oom-start: server 'fake-trial-0'")
    folder = tmp_path / "runs" / "trial-0000"
    assert "CUDA out of memory" in (folder / "server.log").read_text()
    assert "fake server ready" in (folder / "server-2.log").read_text()
    assert [name for name, _ in record.phases].count("start") == 2


def test_a_start_that_keeps_failing_is_tried_twice_then_failed(tmp_path: Path, demo_manifest: Manifest):
    """Stand-in: every start dies (an engine-core failure): one retry, then the trial fails
    with kind crash and the consecutive-failure stop counts it."""
    evaluate = evaluator(tmp_path, fake_manifest(tmp_path, "crash"), demo_manifest)
    with pytest.raises(StudyError, match=r"2 consecutive failed trials \(#0, #1: crash\)"):
        run(tmp_path, evaluate, n_trials=5, max_consecutive_failures=2)
    records = TrialStore(f"sqlite:///{tmp_path / 'study.db'}").records("night")
    assert [(r.state, r.error_kind) for r in records] == [("failed", "crash")] * 2
    assert (tmp_path / "runs" / "trial-0000" / "server-2.log").exists()


def test_oom_while_measuring_is_told_apart_from_oom_at_start(tmp_path: Path, demo_manifest: Manifest):
    """Stand-in: the server starts, then dies with a CUDA OOM at its first chat request."""
    evaluate = evaluator(tmp_path, fake_manifest(tmp_path, "oom-measure"), demo_manifest)
    result = run(tmp_path, evaluate)
    record = result.status.trials[0]
    assert (record.state, record.error_kind) == ("failed", "oom-measure")
    assert "CUDA out of memory" in record.log_tail
    assert not (tmp_path / "runs" / "trial-0000" / "server-2.log").exists()  # not a start failure


def test_a_refused_configuration_is_infeasible_not_failed(tmp_path: Path, demo_manifest: Manifest):
    """Stand-in: the server exits at start with vLLM's ValidationError for k=2 (as vLLM
    does for num_speculative_tokens=0). Optuna sees a COMPLETE trial that violates the
    gate constraint; it is not retried and does not count toward the failure stop."""
    manifest = fake_manifest(tmp_path, "refuse", FAKE_REFUSE_IF="K=2")
    evaluate = evaluator(tmp_path, manifest, demo_manifest)
    configs = [{"w": 8, "k": 1}, {"w": 8, "k": 2}, {"w": 9, "k": 2}, {"w": 9, "k": 1}]
    result = run(
        tmp_path,
        evaluate,
        n_trials=4,
        enqueue=configs,
        enqueue_space_configs=False,
        max_consecutive_failures=1,
    )
    records = result.status.trials
    assert [(r.params["k"], r.state, r.error_kind) for r in records] == [
        (1, "complete", None),
        (2, "refused", "refused"),
        (2, "refused", "refused"),
        (1, "complete", None),
    ]
    refused = records[1]
    assert "the server refused its configuration" in refused.error_message
    assert "validation error for SpeculativeConfig" in refused.error_message
    assert refused.feasible is False and refused.ppl_cap == 10.0
    assert refused.tps == records[0].tps and refused.tps_imputed  # the slowest seen stands in
    trials = optuna_trials(tmp_path)
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4
    assert trials[1].constraints["ppl_gate"] == pytest.approx(10.0)  # 2 x cap - cap
    assert trials[1].user_attrs["sweeper:refused"] is True
    assert trials[0].constraints["ppl_gate"] < 0
    assert not (tmp_path / "runs" / "trial-0001" / "server-2.log").exists()  # not retried
    assert result.status.counts["FAIL"] == 0 and result.best.number in (0, 3)


def test_a_failed_baseline_is_retried_then_the_run_stops(tmp_path: Path):
    calls = []

    def evaluate(params, context):
        calls.append((context.number, context.role))
        context.set_log_tail("INFO loading\nRuntimeError: CUDA error: an illegal memory access")
        raise ServerStartError(f"server exited with code 1 during start-up (trial {context.number})")

    with pytest.raises(StudyError) as caught:
        run(tmp_path, evaluate, n_trials=6, gate=PplGate(cap_rel=1.05))
    message = str(caught.value)
    assert calls == [(0, "baseline"), (1, "baseline")]
    assert message.startswith("the baseline failed 2 time(s) (#0: crash, #1: crash)")
    assert "relative cap (PPL <= 1.05 x baseline PPL) has no reference" in message
    assert "RuntimeError: CUDA error: an illegal memory access" in message
    assert "--ppl-cap" in message and "--trial 1" in message
    trials = optuna_trials(tmp_path)
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] * 2
    assert trials[1].user_attrs["sweeper:retry_of"] == 0


def test_a_baseline_that_fails_once_is_retried_and_the_study_goes_on(tmp_path: Path):
    def evaluate(params, context):
        if context.number == 0:
            raise ServerStartError("server exited with code 1 during start-up", log_tail="OOM")
        return Measurement(tps=toy.tps(params), ppl=toy.ppl(params))

    result = run(tmp_path, evaluate, n_trials=3, gate=PplGate(cap_rel=1.05))
    records = result.status.trials
    assert [(r.role, r.state) for r in records][:2] == [("baseline", "failed"), ("baseline", "complete")]
    assert records[1].params == records[0].params
    assert records[2].ppl_cap == pytest.approx(1.05 * records[1].ppl)
    assert len(records) == 3


def test_a_refused_baseline_stops_at_once(tmp_path: Path, demo_manifest: Manifest):
    """Stand-in: the base manifest itself is refused: nothing to retry, nothing to judge."""
    evaluate = evaluator(tmp_path, fake_manifest(tmp_path, "refuse"), demo_manifest)
    with pytest.raises(StudyError, match=r"the baseline failed 1 time\(s\) \(#0: refused\)"):
        run(tmp_path, evaluate, n_trials=3, gate=PplGate(cap_rel=1.05))
    assert [t.state for t in optuna_trials(tmp_path)] == [optuna.trial.TrialState.FAIL]
