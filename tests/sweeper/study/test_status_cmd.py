"""``sweeper status`` on a study with a known outcome: exit codes and exact output."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import toy
from click.testing import CliRunner

import sweeper
from sweeper.cli import app
from sweeper.errors import ServerError
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, confirmation_role, standing

REPO = Path(__file__).resolve().parents[3]
CONFIGS = [
    {"w": 1, "k": 4},
    {"w": 5, "k": 4},
    {"w": 6, "k": 1},
    {"w": 7, "k": 2},
    {"w": 16, "k": 1},
]


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("status") / "study.db"

    def evaluate(params, context):
        if params == {"w": 7, "k": 2}:
            context.set_log_tail("INFO starting\nERROR address already in use")
            raise ServerError("server exited with code 1 during start-up")
        with context.phase("tps"):
            pass
        return Measurement(tps=toy.tps(params), ppl=toy.ppl(params))

    sweeper.run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name="toy",
            storage=str(path),
            n_trials=5,
            gate=PplGate(cap=toy.CAP),
            enqueue=CONFIGS,
            handle_signals=False,
        ),
    )
    return str(path)


def test_status_summary(study_db: str) -> None:
    result = CliRunner().invoke(app, ["status", "--storage", study_db])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:9] == [
        f"study toy in sqlite:///{study_db}",
        "mode tps, gate PPL <= 1.2, space toy",
        "trials: 4 complete (3 pass the gate, 1 fail it), 1 failed, 0 running, 0 queued",
        "servers: 5 (5 trials searched, 0 race servers, 0 verification servers)",
        # the toy's only phase is its instant TPS, in the 4 trials that have a phase on record
        "time: 0 s of server time in 4 servers: 0.0 % starting, 100.0 % measuring",
        "  TPS          0 s  100.0 %     0.0 s a server",
        "best: trial 1: TPS 230.00 (one server), PPL 1.2000 (cap 1.2000), w=5, k=4",
        "claim: trial 1: 230.0 tok/s, PPL 1.2000 under the cap 1.2000; the base manifest was "
        "not measured, so no speedup can be stated",
        "noise: between-server spread 10.0% (SD of log TPS; 0 df from repeats, prior 10% as 2 df)",
    ]
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["1", "2", "4"]  # the Pareto set


def test_status_json(study_db: str) -> None:
    result = CliRunner().invoke(app, ["status", "--storage", study_db, "--study", "toy", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["counts"]["COMPLETE"] == 4 and data["counts"]["FAIL"] == 1
    assert data["best"]["number"] == 1 and data["best"]["params"] == {"w": 5, "k": 4}
    assert [row["number"] for row in data["pareto"]] == [1, 2, 4]
    assert data["settings"]["ppl_cap"] == 1.2


def test_status_of_a_failed_trial_shows_its_error_and_log(study_db: str) -> None:
    result = CliRunner().invoke(app, ["status", "--storage", study_db, "--trial", "3"])
    assert result.exit_code == 0, result.output
    assert "trial 3 of toy: failed (enqueued-3)" in result.output
    assert "error: port: server exited with code 1 during start-up" in result.output
    assert result.output.rstrip().endswith("INFO starting\nERROR address already in use")
    detail = json.loads(CliRunner().invoke(app, ["status", "--storage", study_db, "--trial", "0", "--json"]).output)
    assert (detail["state"], detail["feasible"], detail["tps"]) == ("complete", False, 270.0)
    assert detail["phases"] == [["tps", pytest.approx(0.0, abs=0.5)]]


def test_status_errors_are_one_line_and_an_exit_code(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    missing = tmp_path / "none.db"
    result = subprocess.run(
        [sys.executable, "-m", "sweeper", "status", "--storage", str(missing)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2  # a user error: the storage to fix
    assert result.stderr.strip() == f"error: no study database at {missing} (see --storage)"
    assert not missing.exists()


def test_status_lists_the_races_that_ran_a_round_and_not_those_screened_at_once() -> None:
    from test_confirm import BASE, RACING, record

    from sweeper.cli._standing_view import standing_lines

    records = [
        record(0, BASE, 100.0, role="baseline"),
        record(1, {"c": 1}, 105.0),  # raced: within the noise of the base
        record(2, {"c": 1}, 70.0, role=confirmation_role(1, 1)),  # its round: far slower now
        record(3, BASE, 102.0, role=confirmation_role(1, 1)),
        record(4, {"c": 2}, 60.0),  # far below at once: never raced
    ]
    now = standing(records, RACING)
    outcomes = {d.contender: (d.outcome, d.rounds) for d in now.decisions}
    assert outcomes[4] == ("screened", 0) and outcomes[1][1] == 1
    races = [line for line in standing_lines(now) if line.startswith("race: ")]
    assert races == [f"race: {d.describe()}" for d in now.decisions if d.contender == 1]
    assert "1 pair after selection" in races[0] and "-31.4 %" in races[0]  # 70 / 102, its round alone


def test_status_shows_the_figures_a_claim_rests_on_and_how_its_interval_was_made() -> None:
    from test_confirm import BASE, FIRM, record

    from sweeper.cli._standing_view import standing_lines

    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 160.0)]
    for n, (a, b) in enumerate(((131.0, 100.0), (129.0, 99.0)), start=1):
        role = confirmation_role(1, n)
        records += [record(2 * n, {"c": 1}, a, role=role), record(2 * n + 1, BASE, b, role=role)]
    lines = standing_lines(standing(records, FIRM))
    assert lines[0].startswith(
        "best: trial 1: TPS 130.00 (geometric mean of the claim's 2 rounds; every reading: "
        "160.0 (selected it: not counted), 131.0, 129.0)"
    )
    # the base at its figures of the same rounds, so that the two divide to the claim
    answer, base = math.sqrt(131.0 * 129.0), math.sqrt(100.0 * 99.0)
    claim = math.exp((math.log(131.0 / 100.0) + math.log(129.0 / 99.0)) / 2)
    assert math.isclose(answer / base, claim)
    (shown,) = [line for line in lines if line.startswith("base manifest: ")]
    assert shown == (
        f"base manifest: trial 0: TPS {base:.2f} (geometric mean of the claim's 2 rounds; every reading: "
        f"100.0 (outside the claim's rounds: not counted), 100.0, 99.0); {answer:.2f} / {base:.2f} = "
        f"{(claim - 1) * 100:+.1f} %, the claim"
    )
    assert f"claim: {(claim - 1) * 100:+.1f} % faster than the base manifest" in lines[1]
    (basis,) = [line for line in lines if line.startswith("claim rests on: ")]
    assert "2 round(s) after selection, answer/base trials 2/3, 4/5 (trial(s) 1 selected it" in basis
    assert "at 95.00 %: the study-wise 95 % shared over its 1 race(s)" in basis
    assert "study-wise 95 % interval" in lines[1]


def test_the_trial_tables_caption_says_a_relative_cap_was_judged_on_the_same_records() -> None:
    import dataclasses

    from evaluators.ppl_uncertainty import PplEstimate
    from storage.testing import trial_record
    from sweeper.cli._trial_view import trial_table as _trial_table

    base = PplEstimate(ppl=2.0, stderr_log_ppl=0.02, records=32)
    gate = PplGate(cap_rel=1.05, confidence=0.9)
    verdict = gate.judge_ppl(2.05, 2.1, stderr_log_ppl=0.02, records=32, reference=base, paired=(0.004, 32))
    record = trial_record(
        1,
        role="",
        params={"w": 4},
        tps=100.0,
        ppl=2.05,
        ppl_cap=2.1,
        feasible=verdict.passes,
        extras=verdict.extras(),
    )
    settings = {
        "ppl_cap_rel": 1.05,
        "reference_ppl": 2.0,
        "reference_stderr_log_ppl": 0.02,
        "reference_ppl_records": 32,
        "ppl_confidence": 0.9,
    }
    table = _trial_table("trials", (record,), settings)
    assert str(table.caption).endswith("under the cap, judged against the baseline on the same records")
    quadrature = dataclasses.replace(
        record, extras=gate.judge_ppl(2.05, 2.1, stderr_log_ppl=0.02, records=32, reference=base).extras()
    )
    assert str(_trial_table("trials", (quadrature,), settings).caption).endswith(
        "under the cap, the baseline's record noise included"
    )


def test_status_says_when_the_repeats_outvote_a_narrow_noise_prior() -> None:
    from test_confirm import BASE, record

    from sweeper.cli._standing_view import standing_lines

    # the GPU demo's readings on a noisy H100 lease (2026-12-06), run with --noise 0.02
    records = [record(0, BASE, 634.7, role="baseline"), record(1, {"c": 1}, 1172.2)]
    for n, (a, b) in enumerate(((751.8, 548.1), (890.7, 457.4)), start=1):
        role = confirmation_role(1, n)
        records += [record(2 * n, {"c": 1}, a, role=role), record(2 * n + 1, BASE, b, role=role)]
    narrow = standing_lines(standing(records, ConfirmSettings(rounds=2, noise=0.02)))
    assert [line for line in narrow if line.startswith("noise prior: ")] == [
        "noise prior: the repeats alone show 19.6% on 4 df, above the prior of 2.0% (chi-square, 99%): "
        "a study on this host should pass --noise 0.20"
    ]
    wide = standing(records, ConfirmSettings(rounds=2, noise=0.13))
    assert not [line for line in standing_lines(wide) if line.startswith("noise prior: ")]
    assert wide.to_dict()["prior_check"]["fit"] == "fits"
