"""The bundled presets, bound to real manifests (the challenge's and the demo's)."""

from __future__ import annotations

import json

import optuna
import pytest

from search_spaces import BASELINE, load_space, preset_names
from sweeper.errors import SearchSpaceError
from sweeper.manifest import Manifest


def test_presets_are_listed() -> None:
    assert {"gemma4-e4b-a10g", "tiny-cpu"} <= set(preset_names())


def test_gemma_preset_declares_the_challenge_knobs() -> None:
    space = load_space("gemma4-e4b-a10g")
    assert space.names == ("sliding_window", "centroid_top_k", "num_speculative_tokens")
    assert space.quality_names == ("sliding_window",)
    assert space.speed_names == ("centroid_top_k", "num_speculative_tokens")
    window = space.parameter("sliding_window")
    assert (window.low, window.high, window.step, window.faster) == (128, 512, 4, "lower")
    top_k = space.parameter("centroid_top_k")
    assert (top_k.low, top_k.high, top_k.log) == (16, 128, True)
    assert top_k.condition is not None and top_k.condition.env_set == "SPECULATIVE_CONFIG"
    tokens = space.parameter("num_speculative_tokens")
    assert (tokens.low, tokens.high) == (1, 8)
    assert [c.name for c in space.enqueue] == ["vidraft-w188-ctk49-k7", BASELINE]
    assert space.enqueue[0].params == {
        "sliding_window": 188,
        "centroid_top_k": 49,
        "num_speculative_tokens": 7,
    }


def test_gemma_preset_on_the_vidraft_manifest(challenge_data) -> None:
    manifest = Manifest.load(challenge_data / "vidraft-fw188-ctk49-manifest.json")
    space = load_space("gemma4-e4b-a10g").bind(manifest.env)
    # the manifest's own values are read back through the same targets
    assert space.base_values() == {
        "sliding_window": 188,
        "centroid_top_k": 49,
        "num_speculative_tokens": 7,
    }
    assert space.overrides(space.base_values()) == {}
    overrides = space.overrides({"sliding_window": 200, "centroid_top_k": 49, "num_speculative_tokens": 5})
    assert set(overrides) == {"HF_OVERRIDES", "SLIDING_WINDOW", "SPECULATIVE_CONFIG"}
    assert json.loads(overrides["HF_OVERRIDES"]) == {"text_config": {"sliding_window": 200}}
    assert overrides["SLIDING_WINDOW"] == "200"
    # K is written into the manifest's own SPECULATIVE_CONFIG: method and drafter path kept
    assert json.loads(overrides["SPECULATIVE_CONFIG"]) == {
        "method": "mtp",
        "model": "/tmp/qat-assistant",
        "num_speculative_tokens": 5,
    }
    rendered = manifest.render(overrides)
    assert rendered.env["CENTROID_TOP_K"] == "49"
    assert rendered.env["WEIGHTS_BUCKET"] == manifest.env["WEIGHTS_BUCKET"]


def test_gemma_preset_refuses_a_manifest_without_a_drafter(challenge_data) -> None:
    manifest = Manifest.load(challenge_data / "baseline-manifest.json")
    with pytest.raises(SearchSpaceError, match="has no SPECULATIVE_CONFIG to write it into"):
        load_space("gemma4-e4b-a10g").bind(manifest.env)


def test_baseline_defaults_when_the_manifest_leaves_a_knob_unset() -> None:
    env = {"SPECULATIVE_CONFIG": '{"method": "mtp", "model": "d", "num_speculative_tokens": 4}'}
    space = load_space("gemma4-e4b-a10g").bind(env)
    # no window and no top-k in the manifest: the model's and the drafter's own defaults
    assert space.base_values() == {
        "sliding_window": 512,
        "centroid_top_k": 32,
        "num_speculative_tokens": 4,
    }
    assert space.overrides(space.base_values()) == {}
    # HF_OVERRIDES is created when the manifest has none; SLIDING_WINDOW is not added
    overrides = space.overrides({"sliding_window": 188, "centroid_top_k": 32, "num_speculative_tokens": 4})
    assert overrides == {"HF_OVERRIDES": '{"text_config":{"sliding_window":188}}'}


def test_tiny_preset_on_the_demo_manifest(demo_manifest) -> None:
    space = load_space("tiny-cpu").bind(demo_manifest.env)
    base = space.base_values()
    assert base == {
        "sliding_window": int(demo_manifest.env["SLIDING_WINDOW"]),
        "centroid_top_k": int(demo_manifest.env["CENTROID_TOP_K"]),
        "num_speculative_tokens": json.loads(demo_manifest.env["SPECULATIVE_CONFIG"])["num_speculative_tokens"],
    }
    overrides = space.overrides({"sliding_window": 16, "centroid_top_k": 4, "num_speculative_tokens": 5})
    assert overrides["SLIDING_WINDOW"] == "16"
    assert overrides["CENTROID_TOP_K"] == "4"
    speculative = json.loads(overrides["SPECULATIVE_CONFIG"])
    assert speculative["num_speculative_tokens"] == 5
    assert speculative["model"] == json.loads(demo_manifest.env["SPECULATIVE_CONFIG"])["model"]


def test_suggest_draws_every_active_parameter_in_range() -> None:
    env = {"SPECULATIVE_CONFIG": '{"method": "mtp", "model": "d", "num_speculative_tokens": 4}'}
    space = load_space("gemma4-e4b-a10g").bind(env)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(20):
        trial = study.ask()
        params = space.suggest(trial)
        assert set(params) == set(space.names)
        assert 128 <= params["sliding_window"] <= 512 and params["sliding_window"] % 4 == 0
        assert 16 <= params["centroid_top_k"] <= 128
        assert 1 <= params["num_speculative_tokens"] <= 8
        study.tell(trial, 0.0)
