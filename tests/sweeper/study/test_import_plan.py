"""Starting a study from an existing manifest: the base env and the first trial."""

from __future__ import annotations

import json

import pytest

from search_spaces import load_preset, space_from_dict
from sweeper.errors import SearchSpaceError
from sweeper.manifest import Manifest
from sweeper.study import Measurement, PplGate, StudyOptions, default_space_for, plan_from_manifest, run_study
from sweeper.sweep import demo_models


def test_the_vidraft_manifest_becomes_the_base_and_the_first_trial(challenge_data, tmp_path) -> None:
    manifest = Manifest.load(challenge_data / "vidraft-fw188-ctk49-manifest.json")
    assert default_space_for(manifest) == "gemma4-e4b-a10g"
    plan = plan_from_manifest(manifest, load_preset("gemma4-e4b-a10g"))
    values = {"sliding_window": 188, "centroid_top_k": 49, "num_speculative_tokens": 7}
    assert dict(plan.enqueued_params) == values
    assert plan.space.enqueue[0].name == "imported:vidraft-fw188-ctk49-n64-patchbridge-v1"
    assert plan.space.base_env == manifest.env and plan.base_manifest is manifest
    assert "LD_PRELOAD" in plan.fixed and "HF_OVERRIDES" not in plan.fixed
    assert plan.skipped == ()

    seen = []

    def evaluate(params, context):
        seen.append((dict(params), dict(context.overrides), context.role))
        return Measurement(tps=500.0 - abs(params["sliding_window"] - 188), ppl=2.39)

    run_study(
        plan.space,
        evaluate,
        StudyOptions(
            study_name="vidraft",
            storage=f"sqlite:///{tmp_path / 's.db'}",
            n_trials=2,
            gate=PplGate(cap_rel=1.05),
            seed=0,
            handle_signals=False,
        ),
    )
    first_params, first_overrides, first_role = seen[0]
    # the manifest's own values ran first, unchanged (no env override at all), once under
    # every name the space gives those values (the relative cap's baseline among them)
    assert first_params == values and first_overrides == {}
    assert set(first_role.split("+")) == {
        "baseline",
        "imported:vidraft-fw188-ctk49-n64-patchbridge-v1",
        "vidraft-w188-ctk49-k7",
    }
    assert seen[1][2] == "sampled"


def test_parameters_that_do_not_apply_are_reported(demo, tmp_path) -> None:
    data = json.loads(demo.manifest.read_text())
    data["env"].pop("SPECULATIVE_CONFIG")
    (tmp_path / "model").symlink_to(demo.model)
    (tmp_path / "plain.json").write_text(json.dumps(data))
    manifest = Manifest.load(tmp_path / "plain.json")
    assert default_space_for(manifest, local_models=demo_models()) == "tiny-cpu"
    assert default_space_for(manifest) is None  # the study itself knows no local model
    space = space_from_dict(
        {
            "name": "two",
            "parameters": [
                {
                    "name": "sliding_window",
                    "type": "int",
                    "low": 8,
                    "high": 64,
                    "affects": "quality",
                    "env": "SLIDING_WINDOW",
                },
                {
                    "name": "centroid_top_k",
                    "type": "int",
                    "low": 1,
                    "high": 16,
                    "affects": "speed",
                    "env": "CENTROID_TOP_K",
                    "condition": {"env_set": "SPECULATIVE_CONFIG"},
                },
            ],
        }
    )
    plan = plan_from_manifest(manifest, space)
    assert dict(plan.enqueued_params) == {"sliding_window": 32}
    assert plan.skipped == (("centroid_top_k", "applies only when the base manifest sets SPECULATIVE_CONFIG"),)
    (searched,) = plan.searched
    assert (searched.name, searched.value, searched.source, searched.in_range) == (
        "sliding_window",
        32,
        "env SLIDING_WINDOW",
        True,
    )


def test_a_space_that_cannot_take_the_manifest_is_named(challenge_data) -> None:
    manifest = Manifest.load(challenge_data / "baseline-manifest.json")
    with pytest.raises(
        SearchSpaceError,
        match=r"baseline-manifest.json cannot be searched with space "
        r"'gemma4-e4b-a10g': .*has no SPECULATIVE_CONFIG to write it into",
    ):
        plan_from_manifest(manifest, load_preset("gemma4-e4b-a10g"))
