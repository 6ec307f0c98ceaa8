"""run_ablation without a server: bad input stops it before any start, and the stored ablation says so."""

from __future__ import annotations

import pytest

from evaluators import TpsSettings
from storage import ABLATION_INTERRUPTED, stored_ablation
from sweeper.ablation import AblationMode, AblationPlan, find_switches, run_ablation
from sweeper.errors import USER_INPUT_ERRORS, UserInputError
from sweeper.measure import EvalSettings


def test_a_missing_prompt_file_stops_the_ablation_and_marks_it_interrupted(demo_manifest, tmp_path) -> None:
    plan = AblationPlan(
        name="bad-data", mode=AblationMode.LEAVE_ONE_OUT, switches=find_switches(demo_manifest.env), rounds=1
    )
    settings = EvalSettings(prompts=tmp_path / "missing.json", tps=TpsSettings(num_prompts=2, output_len=8))
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(USER_INPUT_ERRORS, match="missing.json"):
        run_ablation(demo_manifest, plan, settings, url=url, workdir=tmp_path / "runs")
    record = stored_ablation(url, "bad-data")
    assert record.status == ABLATION_INTERRUPTED and record.servers == () and record.verdicts is None


def test_bad_plans_are_one_line_errors(demo_manifest) -> None:
    switches = find_switches(demo_manifest.env)
    for field, value, message in (
        ("rounds", 0, "--rounds"),
        ("block_size", 0, "--block-size"),
        ("confidence", 1.0, "--confidence"),
        ("name", "", "--name"),
    ):
        arguments = {"name": "x", "mode": AblationMode.LEAVE_ONE_OUT, "switches": switches, field: value}
        with pytest.raises(UserInputError, match=message):
            AblationPlan(**arguments)
