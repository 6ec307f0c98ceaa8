"""`sweeper run --manifest` on the user's own data, with real vLLM on the tiny model: the
held-out part split off by a seeded fraction is what `--verify-top` measures, in fresh servers.

The 'user' is the demo under other names: a non-demo copy of its manifest and its data files
copied, so that nothing of the demo's bundled sets is used implicitly.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from storage import study_status
from sweeper.study import recipe_from_settings

pytestmark = pytest.mark.server


def test_run_on_user_data_splits_held_out_data_off_and_verifies_on_it(tmp_path, user_setup) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    command = [
        sys.executable, "-m", "sweeper", "run",
        "--manifest", str(user_setup.manifest),
        "--prompts", str(user_setup.prompts), "--ppl-data", str(user_setup.ppl_data),
        "--heldout-fraction", "0.5", "--split-seed", "1",
        "--study", "mine", "--storage", url, "--run-dir", str(tmp_path / "runs"),
        "--n-trials", "1", "--num-prompts", "2", "--output-len", "16", "--warmup-requests", "0",
        "--warmup-prompts", "2", "--ppl-records", "4", "--ready-timeout", "600",
        "--verify-top", "1", "--plain", "--json",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["study"] == "mine"
    lines = done.stderr.splitlines()
    assert any(line.startswith("trial 1 of 1, 0 to go after it: #0 ") for line in lines), done.stderr[-3000:]
    assert "trials: 1 of 1 done, 0 to go" in lines

    status = study_status(url, "mine")
    recipe = recipe_from_settings(status.settings)
    assert (recipe.num_prompts, recipe.output_len, recipe.warmup_requests, recipe.warmup_prompts,
            recipe.ppl_records) == (2, 16, 0, 2, 4)  # fmt: skip
    assert (recipe.heldout_fraction, recipe.split_seed, recipe.ready_timeout_s) == (0.5, 1, 600.0)
    n_prompts = len(json.loads(user_setup.prompts.read_text()))
    assert recipe.data_counts["prompts"] + recipe.data_counts["heldout_prompts"] == n_prompts

    (trial,) = status.trials
    assert trial.state == "complete" and trial.feasible, trial.error_message
    (verification,) = status.verifications.values()
    assert verification.trial_number == trial.number
    assert verification.data["prompts"] == str(user_setup.prompts)
    assert verification.data["prompts_split"] == {"heldout_fraction": 0.5, "seed": 1, "part": "heldout"}
    assert verification.data["heldout_prompts"] == recipe.data_counts["heldout_prompts"]
    first = verification.runs[0]
    assert first.state == "complete" and first.tps > 0 and first.ppl is not None, first.error_message
