"""Exporting the answer: the manifest's fields, its paths, secrets, and every refusal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweeper.answer import NothingToExportError, UnverifiedAnswerError, derived_name, export_answer, verify_study
from sweeper.manifest import Manifest
from sweeper.serving import build_serve_command


def verified_study(synthetic, folder: Path, **kwargs):
    study = synthetic.make_study(folder, **kwargs)
    verify_study(
        storage=study.url,
        study_name=study.name,
        top=1,
        repeats=2,
        evaluate=synthetic.synthetic_evaluator(tps_factor=0.99),
    )
    return study


def test_derived_names_are_short_and_stable() -> None:
    params = {"sliding_window": 32, "centroid_top_k": 8, "num_speculative_tokens": 3}
    assert derived_name("tiny-gemma4-demo", params) == "tiny-gemma4-demo-w32-ctk8-k3"
    assert derived_name("base-trial-12", {"max_num_seqs": 2, "gpu_mem": 0.85}) == "base-mns2-gm0p85"


def test_export_writes_the_verified_winner_runnable_from_anywhere(synthetic, demo, tmp_path) -> None:
    study = verified_study(synthetic, tmp_path)
    out = tmp_path / "elsewhere" / "winner.json"
    result = export_answer(storage=study.url, study_name=study.name, output=out)

    assert result.path == out and result.answer.verified
    written = json.loads(out.read_text())
    base = json.loads(demo.manifest.read_text())
    best = synthetic.CONFIGS["C"]  # w36 ctk4 k4: 174 TPS, PPL 2.28
    assert written["name"] == "tiny-gemma4-demo-w36-ctk4-k4"
    description = written["description"]
    assert "trial #" in description and "TPS 174.00, PPL 2.2800 (cap 2.3000)" in description
    assert "VERIFIED on held-out data: median TPS 172.26 over 2 fresh servers" in description
    # the base manifest's other fields are kept
    for key in ("dependencies", "served_model_name", "port"):
        assert written[key] == base[key]
    assert written["serve"] == ["sweeper", "serve", "winner.json"]  # names itself, not manifest.json
    env = written["env"]
    assert env["SLIDING_WINDOW"] == "36" and env["CENTROID_TOP_K"] == "4"
    assert json.loads(env["SPECULATIVE_CONFIG"]) == {
        "method": "mtp",
        "model": str(demo.drafter),
        "num_speculative_tokens": best["num_speculative_tokens"],
    }
    # written elsewhere: the model paths that pointed into the demo folder are absolute now
    assert env["MODEL_ID"] == str(demo.model) and written["model_id"] == str(demo.model)
    assert set(result.made_absolute) == {"env.MODEL_ID", "env.SPECULATIVE_CONFIG.model", "model_id"}
    for key in ("DTYPE", "MAX_MODEL_LEN", "ENFORCE_EAGER"):
        assert env[key] == base["env"][key]
    # and sweeper serve turns it into the vLLM command for exactly that configuration
    serve = build_serve_command(Manifest.load(out), environ={})
    assert serve.model == str(demo.model)
    assert serve.hf_overrides == {"sliding_window": 36}
    assert serve.speculative_config["num_speculative_tokens"] == 4


def test_export_next_to_the_base_manifest_keeps_relative_paths(synthetic, demo, tmp_path) -> None:
    folder = tmp_path / "submission"
    folder.mkdir()
    for part in ("model", "drafter"):
        (folder / part).symlink_to(getattr(demo, part))
    base = json.loads(demo.manifest.read_text())
    base["env"]["HF_TOKEN"] = "hf_secret_value"
    base["env"]["MY_API_KEY"] = "abc"
    (folder / "manifest.json").write_text(json.dumps(base))
    study = verified_study(synthetic, tmp_path, base_manifest=folder / "manifest.json")
    result = export_answer(storage=study.url, study_name=study.name, output=folder / "exported.json")

    written = json.loads((folder / "exported.json").read_text())
    assert written["env"]["MODEL_ID"] == "model"
    assert json.loads(written["env"]["SPECULATIVE_CONFIG"])["model"] == "drafter"
    assert result.made_absolute == ()
    # secrets of the base manifest are not exported
    assert "HF_TOKEN" not in written["env"] and "MY_API_KEY" not in written["env"]
    assert "hf_secret_value" not in (folder / "exported.json").read_text()
    assert result.left_out_secrets == ("HF_TOKEN", "MY_API_KEY")


def test_an_unverified_answer_is_refused_unless_allowed(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    out = tmp_path / "winner.json"
    with pytest.raises(UnverifiedAnswerError) as refused:
        export_answer(storage=study.url, study_name=study.name, output=out)
    message = str(refused.value)
    number = study.number(synthetic.CONFIGS["C"])
    assert message == (
        f"the best trial of study 'synthetic', #{number} (TPS 174.00, PPL 2.2800), has not been "
        f"verified on held-out data: verify it with 'sweeper verify --study synthetic --storage "
        f"{study.url}', or pass --allow-unverified to export it anyway"
    )
    assert not out.exists() and list(tmp_path.glob(".winner.json*")) == []

    result = export_answer(storage=study.url, study_name=study.name, output=out, allow_unverified=True)
    assert result.answer.status == "unverified"
    assert "UNVERIFIED: not re-measured on held-out data." in json.loads(out.read_text())["description"]


def test_a_failed_verification_is_refused_with_how_to_go_on(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    verify_study(
        storage=study.url,
        study_name=study.name,
        top=3,
        repeats=1,
        evaluate=synthetic.synthetic_evaluator(tps_factor=0.5),
    )
    with pytest.raises(
        UnverifiedAnswerError,
        match=r"failed verification \(median held-out TPS .* below .*\): verify more candidates with 'sweeper verify .* --top N'",
    ):
        export_answer(storage=study.url, study_name=study.name, output=tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_nothing_to_export_from_an_empty_or_hopeless_study(synthetic, tmp_path) -> None:
    empty = synthetic.make_empty_study(tmp_path)
    with pytest.raises(NothingToExportError, match="has no trials yet: nothing to export"):
        export_answer(storage=empty.url, study_name=empty.name, output=tmp_path / "a.json")
    hopeless = synthetic.make_study(tmp_path, name="hopeless", configs=list(synthetic.INFEASIBLE_CONFIGS.values()))
    with pytest.raises(
        NothingToExportError, match=r"has no feasible trial: none of its 3 trials \(3 measured\) passed the PPL cap"
    ):
        export_answer(storage=hopeless.url, study_name=hopeless.name, output=tmp_path / "b.json", allow_unverified=True)
    assert list(tmp_path.glob("*.json")) == []


def test_export_never_overwrites_the_base_manifest(synthetic, demo, tmp_path) -> None:
    base = tmp_path / "base"
    shutil.copytree(demo.manifest.parent, base, ignore=shutil.ignore_patterns("*.jsonl", "prompts_*"))
    study = verified_study(synthetic, tmp_path, base_manifest=base / "manifest.json")
    before = (base / "manifest.json").read_text()
    with pytest.raises(Exception, match="is the base manifest itself"):
        export_answer(storage=study.url, study_name=study.name, output=base / "manifest.json")
    assert (base / "manifest.json").read_text() == before
