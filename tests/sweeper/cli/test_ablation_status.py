"""``sweeper status --ablation``: the verdicts of a stored ablation, recomputed from its servers."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from scipy import stats

from storage import AblationServer, AblationStore
from sweeper.cli import app

SWITCHES = [
    {"key": "ENFORCE_EAGER", "subject": "1", "reference": None, "manifest_value": None},
    {"key": "DTYPE", "subject": "bfloat16", "reference": "float32", "manifest_value": "float32"},
]
# round -> (base, ENFORCE_EAGER=1, DTYPE=bfloat16) TPS
FIGURES = {1: (100.0, 60.0, 101.0), 2: (104.0, 61.0, 99.0), 3: (98.0, 58.0, 100.0)}


def _store(url: str, *, rounds: int) -> None:
    overrides = ({}, {"ENFORCE_EAGER": "1"}, {"DTYPE": "bfloat16"})
    with AblationStore(url) as store:
        record = store.start(
            name="abl",
            mode="leave-one-out",
            manifest={"name": "m"},
            switches=SWITCHES,
            settings={"block_size": 2, "confidence": 0.95, "prior_spread": 0.1, "fidelity_prompts": 2},
        )
        for round_number in range(1, rounds + 1):
            for arm, tps in zip((None, 0, 1), FIGURES[round_number], strict=True):
                store.add_server(
                    record.id,
                    AblationServer(
                        round=round_number,
                        block=0,
                        arm=arm,
                        overrides=overrides[0 if arm is None else arm + 1],
                        state="complete",
                        tps=tps,
                        seconds=50.0,
                    ),
                )


def test_status_shows_a_stored_ablation_s_verdicts(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    _store(url, rounds=3)
    done = CliRunner().invoke(app, ["status", "--ablation", "abl", "--storage", url, "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["planned_servers"] == 9 and data["servers"] == 9 and data["status"] == "running"
    eager, dtype = data["switches"]
    assert (eager["verdict"], dtype["verdict"]) == ("hurts", "no effect")
    # eager's effect: the mean log ratio over the rounds, on the two-way spread with the prior as 2 df
    logs = [[math.log(v) for v in FIGURES[r]] for r in (1, 2, 3)]
    expected = sum(row[1] - row[0] for row in logs) / 3
    assert math.log(eager["tps_effect"]["value"]) == pytest.approx(expected)
    grand = sum(map(sum, logs)) / 9
    rows = [sum(row) / 3 for row in logs]
    cols = [sum(row[k] for row in logs) / 3 for k in range(3)]
    ss = sum((logs[i][k] - rows[i] - cols[k] + grand) ** 2 for i in range(3) for k in range(3))
    sigma = math.sqrt((ss + 0.1**2 * 2) / (4 + 2))
    half = stats.t.ppf(1 - 0.025 / 2, 6) * sigma * math.sqrt(2 / 3)
    assert math.log(eager["tps_effect"]["high"]) == pytest.approx(expected + half)
    text = CliRunner().invoke(app, ["status", "--ablation", "abl", "--storage", url])
    assert text.exit_code == 0, text.output
    assert "9 of 9 servers of 3 round(s) stored" in text.stdout
    assert "ENFORCE_EAGER=1 vs unset" in text.stdout and "hurts" in text.stdout


def test_status_of_an_ablation_not_stored_is_a_one_line_error(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    _store(url, rounds=1)
    done = CliRunner().invoke(app, ["status", "--ablation", "other", "--storage", url])
    # the console entry point prints such an error (a storage one here) as one line and exits with its code
    assert done.exception.exit_code == 2
    assert str(done.exception).startswith("no ablation 'other' in sqlite:///") and str(done.exception).endswith(
        "(stored: abl)"
    )
