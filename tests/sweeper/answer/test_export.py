"""Exporting the answer: the manifest's fields, its paths, its dependencies, its mode, secrets,
and every refusal."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from sweeper.answer import (
    NothingToExportError,
    UnverifiedAnswerError,
    VerifySettings,
    derived_name,
    export_answer,
    verify_study,
)
from sweeper.manifest import Manifest
from sweeper.serving import build_serve_command

REPO = Path(__file__).resolve().parents[3]


def project() -> tuple[str, str]:
    """This project's distribution name and version, read from pyproject.toml."""
    tomllib = pytest.importorskip("tomllib")
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return data["name"], data["version"]


def plain_file_mode(folder: Path) -> int:
    """The mode a plain open() gives a new file in ``folder`` (as the report's files get)."""
    probe = folder / ".mode-probe"
    probe.write_text("x")
    mode = stat.S_IMODE(probe.stat().st_mode)
    probe.unlink()
    return mode


def verified_study(synthetic, folder: Path, **kwargs):
    study = synthetic.make_study(folder, **kwargs)
    verify_study(
        VerifySettings(top=1, repeats=2, evaluate=synthetic.synthetic_evaluator(tps_factor=0.99)),
        storage=study.url,
        study_name=study.name,
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
    # the usual mode of a new file (0644 under umask 022), not a temporary file's 0600
    assert stat.S_IMODE(out.stat().st_mode) == plain_file_mode(out.parent)
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
    assert result.pinned_dependencies == {}  # the bundled manifest names this project pinned already
    assert written["serve"] == ["sweeper", "serve", "winner.json"]  # names itself, not manifest.json
    env = written["env"]
    assert env["SLIDING_WINDOW"] == "36" and env["CENTROID_TOP_K"] == "4"
    assert json.loads(env["SPECULATIVE_CONFIG"]) == {
        "method": "mtp",
        "model": str(demo.drafter),
        "num_speculative_tokens": best["num_speculative_tokens"],
    }
    # written elsewhere: the model and drafter do not lie below its folder, so their paths are absolute
    assert env["MODEL_ID"] == str(demo.model) and written["model_id"] == str(demo.model)
    assert result.absolute_paths == {
        "env.MODEL_ID": str(demo.model),
        "env.SPECULATIVE_CONFIG.model": str(demo.drafter),
        "model_id": str(demo.model),
    }
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
    assert result.absolute_paths == {}
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
        VerifySettings(top=3, repeats=1, evaluate=synthetic.synthetic_evaluator(tps_factor=0.5)),
        storage=study.url,
        study_name=study.name,
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


def submission(folder: Path, demo, *, copy: bool = False, **changes) -> Path:
    """A submission folder: the demo manifest (with ``changes``) and its model and drafter, linked
    (or copied)."""
    folder.mkdir(parents=True)
    for part in ("model", "drafter"):
        if copy:
            shutil.copytree(getattr(demo, part), folder / part)
        else:
            (folder / part).symlink_to(getattr(demo, part))
    data = {**json.loads(demo.manifest.read_text()), **changes}
    (folder / "manifest.json").write_text(json.dumps(data, indent=2))
    return folder / "manifest.json"


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from sweeper.cli import main

    monkeypatch.setattr(sys, "argv", ["sweeper", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_paths_are_relative_to_the_exported_folder_where_the_files_lie_below_it(synthetic, demo, tmp_path) -> None:
    work = tmp_path / "work"
    base = submission(work / "entry", demo, copy=True)
    study = verified_study(synthetic, tmp_path, base_manifest=base)

    # exported above the entry: the model and the drafter lie below, so they stay relative
    result = export_answer(storage=study.url, study_name=study.name, output=work / "answer.json")
    written = json.loads((work / "answer.json").read_text())
    assert written["env"]["MODEL_ID"] == written["model_id"] == os.path.join("entry", "model")
    assert json.loads(written["env"]["SPECULATIVE_CONFIG"])["model"] == os.path.join("entry", "drafter")
    assert written["serve"] == ["sweeper", "serve", "answer.json"]
    assert result.absolute_paths == {}
    # so the folder runs where it is copied: the copy's model, not the original's
    copied = tmp_path / "copied"
    shutil.copytree(work, copied)
    shutil.rmtree(work)
    serve = build_serve_command(Manifest.load(copied / "answer.json"), environ={})
    assert serve.model == str(copied / "entry" / "model")
    drafter = json.loads(Manifest.load(copied / "answer.json").env["SPECULATIVE_CONFIG"])["model"]
    assert (copied / drafter).resolve() == (copied / "entry" / "drafter").resolve()
    assert (copied / drafter / "config.json").is_file()


def test_paths_outside_the_exported_folder_are_absolute_and_named_in_a_warning(
    synthetic, demo, tmp_path, monkeypatch, capsys
) -> None:
    base = submission(tmp_path / "entry", demo)
    study = verified_study(synthetic, tmp_path, base_manifest=base)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(
        monkeypatch, capsys, "export", "--storage", study.url, "--study", study.name, "-o", "entry/answer/x.json"
    )
    # the answer's folder holds neither the model nor the drafter: absolute, in the user's spelling (the links)
    model, drafter = str(tmp_path / "entry" / "model"), str(tmp_path / "entry" / "drafter")
    written = json.loads((tmp_path / "entry" / "answer" / "x.json").read_text())
    assert written["env"]["MODEL_ID"] == written["model_id"] == model
    assert json.loads(written["env"]["SPECULATIVE_CONFIG"])["model"] == drafter
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and warnings == [
        "warning: 3 path(s) outside entry/answer are written absolute, so the manifest runs only where they "
        f"exist: env.MODEL_ID = {model}, env.SPECULATIVE_CONFIG.model = {drafter}, model_id = {model}"
    ]
    assert out.startswith("wrote entry/answer/x.json (")


def test_dependencies_naming_this_project_are_pinned_to_this_version(
    synthetic, demo, tmp_path, monkeypatch, capsys
) -> None:
    name, version = project()
    dependencies = ["sweeper[cpu]", "Sweeper_Serving[postgres,gpu] >= 0.0.1; python_version >= '3.10'", "vllm==0.26.0"]
    base = submission(tmp_path / "entry", demo, dependencies=dependencies)
    study = verified_study(synthetic, tmp_path, base_manifest=base)
    code, out, err = cli(
        monkeypatch, capsys, "export", "--storage", study.url, "--study", study.name, "-o", str(base.parent / "x.json")
    )
    written = json.loads((base.parent / "x.json").read_text())
    # "sweeper" on the package index is another project: ours is named, pinned, its extras and marker kept
    pinned = [f"{name}[cpu]=={version}", f'{name}[gpu,postgres]=={version}; python_version >= "3.10"']
    assert written["dependencies"] == [*pinned, "vllm==0.26.0"]
    notes = [line for line in err.splitlines() if line.startswith("note: dependencies")]
    assert code == 0 and notes == [
        f"note: dependencies pinned to this sweeper: {dependencies[0]} -> {pinned[0]}, {dependencies[1]} -> {pinned[1]}"
    ]


def test_a_manifest_with_its_own_serve_command_and_dependencies_keeps_them(synthetic, demo, tmp_path) -> None:
    serve = ["python", "serve.py", "--log-level", "info"]
    dependencies = ["vllm==0.26.0", "./wheels/patch-1.0-py3-none-any.whl", "numpy<3"]
    base = submission(tmp_path / "entry", demo, serve=serve, dependencies=dependencies)
    (base.parent / "serve.py").write_text("raise SystemExit('not run here')\n")
    (base.parent / "wheels").mkdir()
    (base.parent / "wheels" / "patch-1.0-py3-none-any.whl").write_bytes(b"not read")
    study = verified_study(synthetic, tmp_path, base_manifest=base)

    # into its own folder: the serve command and the dependencies exactly as the user wrote them
    inside = export_answer(storage=study.url, study_name=study.name, output=base.parent / "answer.json")
    written = json.loads((base.parent / "answer.json").read_text())
    assert written["serve"] == serve and written["dependencies"] == dependencies
    assert (inside.absolute_paths, inside.pinned_dependencies) == ({}, {})

    # elsewhere: the same names and options; only the files of its folder are named by absolute path
    elsewhere = export_answer(storage=study.url, study_name=study.name, output=tmp_path / "out" / "answer.json")
    written = json.loads((tmp_path / "out" / "answer.json").read_text())
    script, wheel = base.parent / "serve.py", base.parent / "wheels" / "patch-1.0-py3-none-any.whl"
    assert written["serve"] == ["python", str(script), "--log-level", "info"]
    assert written["dependencies"] == ["vllm==0.26.0", str(wheel), "numpy<3"]
    assert elsewhere.absolute_paths == {
        "serve[1]": str(script),
        "env.MODEL_ID": str(base.parent / "model"),
        "env.SPECULATIVE_CONFIG.model": str(base.parent / "drafter"),
        "model_id": str(base.parent / "model"),
        "dependencies[1]": str(wheel),
    }
    assert elsewhere.pinned_dependencies == {}
