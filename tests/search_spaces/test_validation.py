"""Search-space files: every kind of mistake gets an error that names it."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from search_spaces import load_space, space_from_dict
from search_spaces.errors import SearchSpaceError


def window(**changes):
    spec = {
        "name": "window",
        "type": "int",
        "low": 8,
        "high": 64,
        "affects": "quality",
        "env": "SLIDING_WINDOW",
    }
    spec.update(changes)
    return {key: value for key, value in spec.items() if value is not None}


def load(*parameters, **top):
    return space_from_dict({"parameters": list(parameters), **top}, source="space.yaml")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"parameters": [window()], "paramters": 1},
            "unknown key 'paramters' (did you mean 'parameters'?)",
        ),
        (
            {"parameters": [window(stepp=2)]},
            "parameter 'window': unknown key 'stepp' (did you mean 'step'?)",
        ),
        ({"parameters": []}, "'parameters' must be a non-empty list"),
        ({"parameters": [window(low=64, high=8)]}, "empty range: low 64 is not below high 8"),
        ({"parameters": [window(low=8, high=8)]}, "empty range: low 8 is not below high 8"),
        (
            {"parameters": [window(step=100)]},
            "empty range: step 100 is larger than high - low (56)",
        ),
        ({"parameters": [window(affects=None)]}, "'affects' must be 'quality'"),
        ({"parameters": [window(type="integer")]}, "'type' must be int, float or categorical"),
        (
            {"parameters": [window(env=None)]},
            "'env' (the manifest env variable it sets) is required",
        ),
        ({"parameters": [window(log=True, low=0)]}, "a log scale needs low > 0"),
        (
            {"parameters": [window(type="categorical", low=None, high=None, choices=[])]},
            "'choices' must be a non-empty list",
        ),
        (
            {"parameters": [window(type="categorical", high=None, choices=["a"])]},
            "'low' does not apply to a categorical",
        ),
        (
            {"parameters": [window(json_path="a.b", template="x")]},
            "use either 'json_path' or 'template'",
        ),
        ({"parameters": [window(), window()]}, "parameter 'window' is declared twice"),
        (
            {"parameters": [window(condition={"param": "later", "min": 1})]},
            "'param' must name an earlier parameter",
        ),
        (
            {"parameters": [window(condition={"env_set": "X", "param": "y"})]},
            "give exactly one of 'env_set' and 'param'",
        ),
        (
            {"parameters": [window()], "enqueue": [{"params": {"windw": 8}}]},
            "names unknown parameter(s) ['windw']",
        ),
    ],
)
def test_invalid_spaces_name_the_problem(data, message) -> None:
    with pytest.raises(SearchSpaceError) as caught:
        space_from_dict(data, source="space.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("space.yaml")
    assert caught.value.exit_code == 2  # input the user fixes: one line and exit code 2 at the CLI


def test_a_template_with_an_unknown_placeholder() -> None:
    with pytest.raises(SearchSpaceError, match=r"template refers to \$\{drafter\}"):
        load(window(env="SPECULATIVE_CONFIG", template='{"model": "${drafter}", "k": $value}'))


def test_a_template_that_renders_invalid_json() -> None:
    with pytest.raises(SearchSpaceError, match="template renders invalid JSON for value 8"):
        load(window(env="HF_OVERRIDES", template='{"sliding_window": $value,}'))


def test_a_template_renders_with_the_other_parameters() -> None:
    tokens = {
        "name": "tokens",
        "type": "int",
        "low": 1,
        "high": 6,
        "affects": "speed",
        "env": "SPECULATIVE_CONFIG",
        "template": ('{"method": "mtp", "model": "drafter", "num_speculative_tokens": $value, "w": $window}'),
    }
    space = load(window(), tokens).bind({})
    assert space.overrides({"window": 16, "tokens": 3}) == {
        "SLIDING_WINDOW": "16",
        "SPECULATIVE_CONFIG": ('{"method": "mtp", "model": "drafter", "num_speculative_tokens": 3, "w": 16}'),
    }


def test_conditions_on_the_manifest_and_on_another_parameter() -> None:
    speculative = {
        "name": "speculative",
        "type": "categorical",
        "choices": ["on", "off"],
        "affects": "speed",
        "env": "USE_DRAFTER",
    }
    top_k = {
        "name": "top_k",
        "type": "int",
        "low": 1,
        "high": 16,
        "affects": "speed",
        "env": "CENTROID_TOP_K",
        "condition": {"param": "speculative", "in": ["on"]},
    }
    drafter_only = {
        **top_k,
        "name": "drafter_only",
        "env": "X",
        "condition": {"env_set": "SPECULATIVE_CONFIG"},
    }
    space = load(window(), speculative, top_k, drafter_only)
    assert space.bind({"SPECULATIVE_CONFIG": "{}"}).names == (
        "window",
        "speculative",
        "top_k",
        "drafter_only",
    )
    bound = space.bind({})
    assert bound.names == ("window", "speculative", "top_k")  # no drafter: not searched
    off = optuna.trial.FixedTrial({"window": 8, "speculative": "off", "top_k": 4})
    assert bound.suggest(off) == {"window": 8, "speculative": "off"}
    on = optuna.trial.FixedTrial({"window": 8, "speculative": "on", "top_k": 4})
    assert bound.suggest(on) == {"window": 8, "speculative": "on", "top_k": 4}
    # an inactive parameter writes nothing
    assert bound.overrides({"window": 8, "speculative": "off", "top_k": 4}) == {
        "SLIDING_WINDOW": "8",
        "USE_DRAFTER": "off",
    }


def test_json_path_needs_a_json_object_in_the_manifest() -> None:
    tokens = {
        "name": "tokens",
        "type": "int",
        "low": 1,
        "high": 6,
        "affects": "speed",
        "env": "SPECULATIVE_CONFIG",
        "json_path": "num_speculative_tokens",
    }
    space = load(window(), tokens)
    with pytest.raises(SearchSpaceError, match="SPECULATIVE_CONFIG is not valid JSON"):
        space.bind({"SPECULATIVE_CONFIG": "mtp"})
    with pytest.raises(SearchSpaceError, match="has no SPECULATIVE_CONFIG to write it into"):
        space.bind({})


def test_files_yaml_and_toml_give_the_same_space(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: s\nparameters:\n"
        "  - {name: w, type: int, low: 8, high: 64, step: 8, affects: quality, faster: lower,\n"
        "     env: SLIDING_WINDOW}\n"
        "  - {name: k, type: int, low: 1, high: 6, affects: speed, env: K}\n"
        "enqueue:\n  - {name: start, params: {w: 16, k: 2}}\n"
    )
    (tmp_path / "s.toml").write_text(
        'name = "s"\n'
        "[[parameters]]\n"
        'name = "w"\ntype = "int"\nlow = 8\nhigh = 64\nstep = 8\naffects = "quality"\n'
        'faster = "lower"\nenv = "SLIDING_WINDOW"\n'
        "[[parameters]]\n"
        'name = "k"\ntype = "int"\nlow = 1\nhigh = 6\naffects = "speed"\nenv = "K"\n'
        "[[enqueue]]\n"
        'name = "start"\nparams = {w = 16, k = 2}\n'
    )
    from_yaml, from_toml = load_space(tmp_path / "s.yaml"), load_space(tmp_path / "s.toml")
    assert from_yaml.to_dict() == from_toml.to_dict()
    assert from_yaml.bind({}).enqueued_params() == [("start", {"w": 16, "k": 2})]


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(SearchSpaceError, match="no such file, and not a preset"):
        load_space(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("parameters: [")
    with pytest.raises(SearchSpaceError, match="not valid YAML"):
        load_space(tmp_path / "bad.yaml")
    (tmp_path / "bad.toml").write_text("parameters = [")
    with pytest.raises(SearchSpaceError, match="not valid TOML"):
        load_space(tmp_path / "bad.toml")


def test_grid_values_cover_the_range() -> None:
    space = load(
        window(step=8),
        {
            "name": "k",
            "type": "int",
            "low": 16,
            "high": 128,
            "log": True,
            "affects": "speed",
            "env": "K",
        },
    )
    grid = space.grid(max_points=8)
    assert grid["window"] == [8, 16, 24, 32, 40, 48, 56, 64]
    assert grid["k"] == [16, 22, 29, 39, 53, 71, 95, 128]
