"""A configuration real vLLM refuses, told to Optuna as infeasible (the tiny model on CPU).

vLLM's SpeculativeConfig rejects ``num_speculative_tokens=0`` at start-up
(pydantic: "Input should be greater than 0"); the study must record it as
refused, not retry it, and tell Optuna a COMPLETE trial that violates the
gate constraint, then go on with the next configuration.
"""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest

import sweeper
from evaluators import PplSettings, TpsSettings, WarmupSettings
from search_spaces import space_from_dict
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, ServerEvaluator
from sweeper.study import PplGate, StudyOptions

pytestmark = pytest.mark.server


def test_vllm_refusal_is_an_infeasible_trial(tmp_path: Path, demo_manifest: Manifest):
    space = space_from_dict(
        {
            "name": "k-only",
            "parameters": [
                {
                    "name": "num_speculative_tokens",
                    "type": "int",
                    "low": 0,
                    "high": 3,
                    "affects": "speed",
                    "env": "SPECULATIVE_CONFIG",
                    "json_path": "num_speculative_tokens",
                },
            ],
        },
        source="k-only.yaml",
    ).bind(demo_manifest.env)
    demo = demo_paths()
    settings = EvalSettings(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        tps=TpsSettings(num_prompts=1, output_len=8, warmup_requests=0),
        ppl=PplSettings(max_records=2),
        warmup=WarmupSettings(num_prompts=1),
        ready_timeout_s=300,
    )
    evaluate = ServerEvaluator(demo_manifest, settings, run_dir=tmp_path / "runs")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    began = time.monotonic()
    result = sweeper.run_study(
        space,
        evaluate,
        StudyOptions(
            study_name="refusal",
            storage=url,
            n_trials=1,
            gate=PplGate(cap=10.0),
            enqueue=[{"num_speculative_tokens": 0}],
            enqueue_space_configs=False,
            max_consecutive_failures=1,
            handle_signals=False,
        ),
    )
    elapsed = time.monotonic() - began
    record = result.status.trials[0]
    assert (record.state, record.error_kind, record.feasible) == ("refused", "refused", False)
    assert "validation error for SpeculativeConfig" in record.error_message
    assert "greater than 0" in record.error_message
    assert not (tmp_path / "runs" / "trial-0000" / "server-2.log").exists()  # not retried
    trial = optuna.load_study(study_name="refusal", storage=url).trials[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.constraints["ppl_gate"] == pytest.approx(10.0)
    assert result.stop_reason == "n_trials" and elapsed < 120
    print(f"refusal measured in {elapsed:.1f} s")
