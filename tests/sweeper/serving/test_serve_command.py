"""The manifest env -> vLLM arguments translation of `sweeper serve` (no server started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.errors import ManifestError
from sweeper.manifest import Manifest
from sweeper.serving import GREEDY_GENERATION_CONFIG, TOP_K_FIELD, build_serve_command, drafter_with_top_k


def option(argv, name):
    return argv[argv.index(name) + 1]


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    (tmp_path / "text-model").mkdir()
    (tmp_path / "text-model" / "config.json").write_text(json.dumps({"sliding_window": 32}))
    (tmp_path / "mm-model").mkdir()
    (tmp_path / "mm-model" / "config.json").write_text(json.dumps({"text_config": {"sliding_window": 512}}))
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(
        json.dumps({"use_ordered_embeddings": True, "num_centroids": 16, TOP_K_FIELD: 4})
    )
    (drafter / "model.safetensors").write_bytes(b"weights")
    return tmp_path


def manifest(folder: Path, env: dict[str, str], **fields) -> Manifest:
    data = {"name": "t", "serve": ["sweeper", "serve", "manifest.json"], "env": env, **fields}
    path = folder / "manifest.json"
    path.write_text(json.dumps(data))
    return Manifest.load(path)


def test_basic_arguments_and_defaults(layout: Path):
    m = manifest(
        layout,
        {
            "MODEL_ID": "text-model",
            "MAX_MODEL_LEN": "1024",
            "MAX_NUM_SEQS": "1",
            "MAX_NUM_BATCHED_TOKENS": "512",
            "GPU_MEMORY_UTILIZATION": "0.9",
            "DTYPE": "float32",
            "ENFORCE_EAGER": "1",
        },
        served_model_name="tiny",
        port=8123,
    )
    cmd = build_serve_command(m, environ={})
    argv = list(cmd.argv)
    assert option(argv, "--model") == str((layout / "text-model").resolve())
    assert option(argv, "--served-model-name") == "tiny"
    assert option(argv, "--host") == "127.0.0.1"
    assert option(argv, "--port") == "8123"
    assert option(argv, "--max-model-len") == "1024"
    assert option(argv, "--max-num-seqs") == "1"
    assert option(argv, "--max-num-batched-tokens") == "512"
    assert option(argv, "--gpu-memory-utilization") == "0.9"
    assert option(argv, "--dtype") == "float32"
    assert "--enforce-eager" in argv
    assert json.loads(option(argv, "--override-generation-config")) == GREEDY_GENERATION_CONFIG
    assert "--hf-overrides" not in argv and "--speculative-config" not in argv


def test_environment_wins_over_manifest_and_host_is_explicit(layout: Path):
    m = manifest(layout, {"MODEL_ID": "text-model", "PORT": "8000"})
    cmd = build_serve_command(m, environ={"PORT": "9100", "HOST": "0.0.0.0"})
    assert cmd.port == 9100
    assert cmd.host == "0.0.0.0"


def test_sliding_window_top_level_for_text_only_config(layout: Path):
    m = manifest(layout, {"MODEL_ID": "text-model", "SLIDING_WINDOW": "16"})
    cmd = build_serve_command(m, environ={})
    assert json.loads(option(list(cmd.argv), "--hf-overrides")) == {"sliding_window": 16}


def test_sliding_window_nested_and_merged_with_hf_overrides(layout: Path):
    m = manifest(
        layout,
        {
            "MODEL_ID": "mm-model",
            "SLIDING_WINDOW": "188",
            "HF_OVERRIDES": json.dumps({"text_config": {"sliding_window": 512, "x": 1}, "y": 2}),
        },
    )
    cmd = build_serve_command(m, environ={})
    assert cmd.hf_overrides == {"text_config": {"sliding_window": 188, "x": 1}, "y": 2}


def test_vidraft_manifest_translates(challenge_data: Path):
    m = Manifest.load(challenge_data / "vidraft-fw188-ctk49-manifest.json")
    m = m.render({"CENTROID_TOP_K": ""})  # its drafter lives on another machine
    cmd = build_serve_command(m, environ={})
    argv = list(cmd.argv)
    assert cmd.model == "google/gemma-4-E4B-it"
    assert cmd.hf_overrides == {"text_config": {"sliding_window": 188}}
    assert cmd.speculative_config == {
        "method": "mtp",
        "model": "/tmp/qat-assistant",
        "num_speculative_tokens": 7,
    }
    assert option(argv, "--max-num-seqs") == "1"
    assert option(argv, "--performance-mode") == "interactivity"
    assert json.loads(option(argv, "--override-generation-config")) == {
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    assert "WARMUP_BRIDGE" not in cmd.not_interpreted  # read by sweeper's evaluators
    assert {"FA_SLIDING", "ONEGRAPH", "WEIGHTS_BUCKET"} <= set(cmd.not_interpreted)


def test_centroid_top_k_uses_a_linked_copy_of_the_drafter(layout: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path / "cache"))
    before = (layout / "drafter" / "config.json").read_text()
    spec = {"method": "mtp", "model": "drafter", "num_speculative_tokens": 3}
    m = manifest(
        layout,
        {"MODEL_ID": "text-model", "SPECULATIVE_CONFIG": json.dumps(spec), "CENTROID_TOP_K": "2"},
    )
    cmd = build_serve_command(m, environ={})
    copy = Path(cmd.speculative_config["model"])
    assert copy.parent == tmp_path / "cache" / "drafters"
    assert json.loads((copy / "config.json").read_text())[TOP_K_FIELD] == 2
    weights = copy / "model.safetensors"
    assert weights.is_symlink() and weights.resolve() == (layout / "drafter" / "model.safetensors").resolve()
    assert (layout / "drafter" / "config.json").read_text() == before
    # the same value reuses the same folder; the drafter's own value needs no copy
    assert drafter_with_top_k(str(layout / "drafter"), 2) == copy
    assert drafter_with_top_k(str(layout / "drafter"), 4) == (layout / "drafter").resolve()


def test_num_speculative_tokens_shortcut(layout: Path):
    spec = {"method": "mtp", "model": "drafter", "num_speculative_tokens": 3}
    m = manifest(
        layout,
        {"MODEL_ID": "text-model", "SPECULATIVE_CONFIG": json.dumps(spec), "NUM_SPECULATIVE_TOKENS": "5"},
    )
    cmd = build_serve_command(m, environ={})
    assert cmd.speculative_config["num_speculative_tokens"] == 5
    assert cmd.speculative_config["model"] == str((layout / "drafter").resolve())


@pytest.mark.parametrize(
    ("env", "field", "words"),
    [
        ({"SLIDING_WINDOW": "wide"}, "env.SLIDING_WINDOW", "must be an integer"),
        ({"SLIDING_WINDOW": "0"}, "env.SLIDING_WINDOW", "must be positive"),
        ({"HF_OVERRIDES": "{oops"}, "env.HF_OVERRIDES", "not valid JSON"),
        ({"SPECULATIVE_CONFIG": "[1]"}, "env.SPECULATIVE_CONFIG", "must be a JSON object"),
        ({"ENFORCE_EAGER": "maybe"}, "env.ENFORCE_EAGER", "1/0 or true/false"),
        (
            {"SPECULATIVE_CONFIG": '{"method":"mtp","model":"drafter"}', "CENTROID_TOP_K": "99"},
            "env.CENTROID_TOP_K",
            "num_centroids (16)",
        ),
        (
            {"SPECULATIVE_CONFIG": '{"method":"mtp","model":"no-such-drafter"}', "CENTROID_TOP_K": "2"},
            "env.SPECULATIVE_CONFIG",
            "not a local folder",
        ),
    ],
)
def test_bad_values_name_the_field(layout: Path, env, field, words):
    m = manifest(layout, {"MODEL_ID": "text-model", **env})
    with pytest.raises(ManifestError) as caught:
        build_serve_command(m, environ={})
    assert f"field '{field}'" in str(caught.value)
    assert words in str(caught.value)


def test_missing_model(layout: Path):
    m = manifest(layout, {})
    with pytest.raises(ManifestError, match="field 'model_id'"):
        build_serve_command(m, environ={})
