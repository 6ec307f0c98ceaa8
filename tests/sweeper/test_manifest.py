"""Manifest: load, validate, render, save, against the challenge's real manifests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sweeper.errors import ManifestError
from sweeper.manifest import Manifest, parse_assignments


def write(tmp_path: Path, data: object, name: str = "manifest.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


VALID = {
    "name": "m",
    "description": "d",
    "dependencies": ["vllm"],
    "model_id": "org/model",
    "served_model_name": "served",
    "port": 8123,
    "serve": ["python", "serve.py"],
    "env": {"MAX_MODEL_LEN": "4096"},
}


@pytest.mark.parametrize("name", ["baseline-manifest.json", "vidraft-fw188-ctk49-manifest.json"])
def test_challenge_manifests_load_and_round_trip(challenge_data: Path, tmp_path: Path, name: str):
    original = json.loads((challenge_data / name).read_text())
    manifest = Manifest.load(challenge_data / name)
    assert manifest.name == original["name"]
    assert manifest.serve == ("python", "serve.py")
    assert dict(manifest.env) == original["env"]
    assert manifest.port == 8000
    saved = manifest.save(tmp_path / "copy.json")
    again = Manifest.load(saved)
    assert again == manifest
    assert json.loads(saved.read_text()) == original


def test_vidraft_values_are_read(challenge_data: Path):
    manifest = Manifest.load(challenge_data / "vidraft-fw188-ctk49-manifest.json")
    assert manifest.get("SLIDING_WINDOW") == "188"
    assert manifest.get("CENTROID_TOP_K") == "49"
    assert json.loads(manifest.get("SPECULATIVE_CONFIG"))["num_speculative_tokens"] == 7
    assert manifest.get("MODEL_ID") == "google/gemma-4-E4B-it"  # falls back to model_id


def test_unknown_top_level_fields_are_kept(tmp_path: Path):
    manifest = Manifest.load(write(tmp_path, {**VALID, "notes": {"a": 1}}))
    assert manifest.extra == {"notes": {"a": 1}}
    assert json.loads(manifest.to_json())["notes"] == {"a": 1}


def test_render_applies_overrides_without_touching_the_original(tmp_path: Path):
    manifest = Manifest.load(write(tmp_path, VALID))
    rendered = manifest.render({"SLIDING_WINDOW": "24", "PORT": "9001"}, name="trial-3")
    assert rendered.env["SLIDING_WINDOW"] == "24"
    assert rendered.port == 9001
    assert rendered.name == "trial-3"
    assert "SLIDING_WINDOW" not in manifest.env
    assert manifest.port == 8123
    assert rendered.folder == manifest.folder


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ("{not json", None, "not valid JSON (line 1"),
        ([1, 2], None, "must be a JSON object"),
        ({k: v for k, v in VALID.items() if k != "serve"}, "serve", "is missing"),
        ({**VALID, "serve": []}, "serve", "non-empty list"),
        ({**VALID, "serve": "python serve.py"}, "serve", "non-empty list"),
        ({**VALID, "env": {"MAX_MODEL_LEN": 4096}}, "env.MAX_MODEL_LEN", "must be a string, not a number"),
        ({**VALID, "env": ["A=1"]}, "env", "must be an object"),
        ({**VALID, "port": "8000"}, "port", "integer from 1 to 65535"),
        ({**VALID, "port": 70000}, "port", "integer from 1 to 65535"),
        ({**VALID, "name": 3}, "name", "must be a string"),
        ({**VALID, "dependencies": "vllm"}, "dependencies", "list of strings"),
        ({**VALID, "serve": ["no-such-command-xyz", "x"]}, "serve", "does not exist"),
        ({**VALID, "serve": ["./missing.sh"]}, "serve", "does not exist"),
    ],
)
def test_bad_manifests_name_file_and_field(tmp_path: Path, data, field, words):
    path = write(tmp_path, data)
    with pytest.raises(ManifestError) as caught:
        Manifest.load(path)
    message = str(caught.value)
    assert str(path) in message
    assert words in message
    if field:
        assert f"field '{field}'" in message
    assert "\n" not in message
    assert caught.value.exit_code == 2


def test_missing_file(tmp_path: Path):
    with pytest.raises(ManifestError, match="no such file"):
        Manifest.load(tmp_path / "absent.json")


def test_serve_command_resolution(tmp_path: Path):
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    manifest = Manifest.load(write(tmp_path, {**VALID, "serve": ["./serve.sh", "--x"]}))
    assert manifest.resolve_serve_command() == [str(script), "--x"]
    sweeper_cmd = Manifest.load(write(tmp_path, {**VALID, "serve": ["sweeper", "serve", "m.json"]}))
    assert sweeper_cmd.resolve_serve_command() == [sys.executable, "-m", "sweeper", "serve", "m.json"]


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path: Path):
    manifest = Manifest.load(write(tmp_path, VALID))
    target = tmp_path / "out" / "manifest.json"
    manifest.save(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["manifest.json"]


def test_parse_assignments():
    assert parse_assignments(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(ManifestError, match="expected KEY=VALUE"):
        parse_assignments(["novalue"])


def test_redacted_drops_secrets_only(tmp_path: Path):
    env = {
        "HF_TOKEN": "hf_abc",
        "AWS_SECRET_ACCESS_KEY": "s",
        "OPENAI_API_KEY": "k",
        "DB_PASSWORD": "p",
        "MAX_MODEL_LEN": "4096",
        "CENTROID_TOP_K": "49",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    manifest = Manifest.load(write(tmp_path, {**VALID, "env": env}))
    clean = manifest.redacted()
    assert dict(clean.env) == {
        "MAX_MODEL_LEN": "4096",
        "CENTROID_TOP_K": "49",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert "hf_abc" not in clean.to_json()
    assert manifest.env["HF_TOKEN"] == "hf_abc"  # the original is untouched
