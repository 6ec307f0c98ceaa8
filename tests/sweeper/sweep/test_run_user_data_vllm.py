"""`sweeper run --manifest` on the user's own data, with real vLLM on the tiny model: the
held-out part split off by a seeded fraction is what `--verify-top` measures, in fresh servers.

The 'user' is the demo under other names: a non-demo copy of its manifest and its data files
copied, so that nothing of the demo's bundled sets is used implicitly. Under its absolute cap
the run gates at the default confidence (90 %) on as many new records as verify scores; the
trial's upper bound is recomputed here from its stored per-record rows, verify's held-out PPL
is stated with its interval, and the same study resumed with another level is refused in one
line before any server starts.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from click.testing import CliRunner
from scipy import stats

from storage import TrialStore, study_status
from sweeper.cli import app
from sweeper.study import recipe_from_settings

CAP = 3.0  # the demo's PPL is about 2.1: the 90 % bound on 4 records passes it

pytestmark = pytest.mark.server


def test_run_on_user_data_splits_held_out_data_off_and_verifies_on_it(tmp_path, user_setup) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    command = [
        sys.executable,
        "-m",
        "sweeper",
        "run",
        "--manifest",
        str(user_setup.manifest),
        "--prompts",
        str(user_setup.prompts),
        "--ppl-data",
        str(user_setup.ppl_data),
        "--heldout-fraction",
        "0.5",
        "--split-seed",
        "1",
        "--study",
        "mine",
        "--storage",
        url,
        "--run-dir",
        str(tmp_path / "runs"),
        "--n-trials",
        "1",
        "--num-prompts",
        "2",
        "--output-len",
        "16",
        "--warmup-requests",
        "0",
        "--warmup-prompts",
        "2",
        "--ppl-records",
        "4",
        "--ready-timeout",
        "600",
        "--verify-top",
        "1",
        "--plain",
        "--json",
        "--ppl-cap",
        str(CAP),
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["study"] == "mine"
    lines = done.stderr.splitlines()
    started = [line for line in lines if line.startswith("trial 0 (")]  # by its number in the study alone
    assert any(line.endswith(": searching 1 of 1, 0 to go after it") for line in started), done.stderr[-3000:]
    assert "trials: 1 of 1 searched, 0 to go" in lines
    assert "gate: PPL <= 3 at 90 % confidence on 4 new records" in lines  # 4: what verify scores

    status = study_status(url, "mine")
    recipe = recipe_from_settings(status.settings)
    assert (
        recipe.num_prompts,
        recipe.output_len,
        recipe.warmup_requests,
        recipe.warmup_prompts,
        recipe.ppl_records,
    ) == (2, 16, 0, 2, 4)
    assert (recipe.heldout_fraction, recipe.split_seed, recipe.ready_timeout_s) == (0.5, 1, 600.0)
    n_prompts = len(json.loads(user_setup.prompts.read_text()))
    assert recipe.data_counts["prompts"] + recipe.data_counts["heldout_prompts"] == n_prompts

    (trial,) = status.trials
    assert trial.state == "complete" and trial.feasible, trial.error_message
    assert (status.settings["ppl_confidence"], status.settings["ppl_rerun_records"]) == (0.9, 4)
    # the gate judged the 90 % upper bound for a re-run on 4 new records, from the trial's own records
    store = TrialStore(url)
    rows = [r for r in store.record("mine", trial.number).requests if r.get("kind") == "ppl"]
    store.close()
    nll, tokens = [r["nll"] for r in rows], [r["tokens"] for r in rows]
    m, mean = len(rows), sum(nll) / sum(tokens)
    se = math.sqrt(sum((n - mean * t) ** 2 for n, t in zip(nll, tokens)) / (m - 1) / m) / (sum(tokens) / m)
    bound = math.exp(mean + stats.t.ppf(0.9, m - 1) * se * math.sqrt(1 + m / 4))  # t on m - 1 df
    assert m == 4 and trial.extras["ppl_bound"] == pytest.approx(bound, rel=1e-9)
    assert trial.feasible == (bound <= CAP)
    (verification,) = status.verifications.values()
    assert verification.trial_number == trial.number
    assert verification.data["prompts"] == str(user_setup.prompts)
    assert verification.data["prompts_split"] == {"heldout_fraction": 0.5, "seed": 1, "part": "heldout"}
    assert verification.data["heldout_prompts"] == recipe.data_counts["heldout_prompts"]
    first = verification.runs[0]
    assert first.state == "complete" and first.tps > 0 and first.ppl is not None, first.error_message

    # verify states the held-out PPL (the highest of the repeats) with its interval over its records
    first = max((r for r in verification.runs if r.state == "complete"), key=lambda r: r.ppl)
    held_se, held_m = first.extras["ppl_stderr_records"], first.extras["ppl_records"]
    assert held_m == 4 and held_se > 0
    shown = CliRunner().invoke(app, ["verify", "--storage", url, "--study", "mine", "--top", "1"])
    # nothing is measured again; exit code 1 when the stored verdict failed (2 x 16 tokens is
    # a noisy TPS figure: the verdict is not this test's subject)
    assert shown.exit_code == (0 if verification.verified else 1), shown.output
    z = stats.t.ppf(0.975, held_m - 1)
    chance = stats.t.cdf(math.log(CAP / first.ppl) / (held_se * math.sqrt(2)), held_m - 1)
    line = next(line for line in shown.output.splitlines() if "held-out PPL" in line)
    assert line.startswith(
        f"  trial #{trial.number}: held-out PPL {first.ppl:.4f} (95 % interval "
        f"{first.ppl * math.exp(-z * held_se):.4f}-{first.ppl * math.exp(z * held_se):.4f} over 4 records); "
        "on 4 new records of this kind, under 3.0000 with probability "
    ), line
    assert f"with probability {chance:.2f}" in line or chance >= 0.995 and "above 0.99" in line

    # the same study with another level: refused in one line, before any server
    refused = subprocess.run(
        [*command, "--ppl-confidence", "0.95"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines()[-1] == (
        "error: --ppl-confidence 0.95: study 'mine' was started with the gate PPL <= 3 at 90 % "
        "confidence on 4 new records: resume it without the option (it keeps its own), or start "
        "another study with --study NAME"
    )
