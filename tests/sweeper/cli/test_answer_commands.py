"""The verify / report / export / import commands: exit codes and what they print."""

from __future__ import annotations

import json
import sys

import pytest

from sweeper.answer import VerifySettings, verify_study
from sweeper.cli import main


def sweeper(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["sweeper", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def studies(synthetic, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-studies")
    return {
        "plain": synthetic.make_study(folder, name="plain"),
        "hopeless": synthetic.make_study(folder, name="hopeless", configs=list(synthetic.INFEASIBLE_CONFIGS.values())),
        "empty": synthetic.make_empty_study(folder, name="empty"),
    }


def test_export_refuses_an_unverified_winner_and_writes_nothing(monkeypatch, capsys, studies, tmp_path) -> None:
    study = studies["plain"]
    out = tmp_path / "winner.json"
    code, stdout, stderr = sweeper(
        monkeypatch, capsys, "export", "--storage", study.url, "--study", study.name, "-o", str(out)
    )
    assert code == 1 and stdout == ""
    assert stderr.startswith("error: the best trial of study 'plain', #")
    assert f"verify it with 'sweeper verify --study plain --storage {study.url}'" in stderr
    assert stderr.rstrip().endswith("or pass --allow-unverified to export it anyway")
    assert stderr.count("\n") == 1  # one line, no traceback
    assert not out.exists()

    code, stdout, stderr = sweeper(
        monkeypatch,
        capsys,
        "export",
        "--storage",
        study.url,
        "--study",
        study.name,
        "-o",
        str(out),
        "--allow-unverified",
        "--json",
    )
    assert code == 0
    assert json.loads(stdout)["status"] == "unverified"
    assert "warning: exported an answer that is UNVERIFIED" in stderr
    assert json.loads(out.read_text())["name"] == "tiny-gemma4-demo-w36-ctk4-k4"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty", "error: study 'empty' has no trials yet: nothing to export (run 'sweeper run' first)\n"),
        (
            "hopeless",
            "error: study 'hopeless' has no feasible trial: none of its 3 trials (3 measured) "
            "passed the PPL cap, so there is no manifest to export\n",
        ),
    ],
)
def test_export_with_nothing_to_export(monkeypatch, capsys, studies, tmp_path, kind, message) -> None:
    study = studies[kind]
    code, stdout, stderr = sweeper(
        monkeypatch,
        capsys,
        "export",
        "--storage",
        study.url,
        "--study",
        study.name,
        "-o",
        str(tmp_path / "x.json"),
        "--allow-unverified",
    )
    assert (code, stdout, stderr) == (1, "", message)
    assert list(tmp_path.iterdir()) == []


def test_report_of_an_empty_study_fails_and_writes_nothing(monkeypatch, capsys, studies, tmp_path) -> None:
    study = studies["empty"]
    code, stdout, stderr = sweeper(
        monkeypatch, capsys, "report", "--storage", study.url, "--study", study.name, "-o", str(tmp_path / "out")
    )
    assert code == 1 and stdout == ""
    assert stderr == (
        "error: study 'empty' has no trials yet: nothing to report (run 'sweeper run --study empty' first)\n"
    )
    assert not (tmp_path / "out").exists()


def test_report_of_a_study_without_feasible_trials_says_so(monkeypatch, capsys, studies, tmp_path) -> None:
    study = studies["hopeless"]
    code, stdout, stderr = sweeper(
        monkeypatch, capsys, "report", "--storage", study.url, "--study", study.name, "-o", str(tmp_path / "out")
    )
    assert code == 0
    assert (
        "note: no trial of study 'hopeless' passed the PPL cap 2.3000: there is no winner "
        "(the report shows what was tried)"
    ) in stderr
    assert stdout.splitlines()[:2] == [
        f"report of study 'hopeless' written to {tmp_path / 'out'}",
        f"  open {tmp_path / 'out' / 'report.html'}",
    ]
    assert (tmp_path / "out" / "report.html").is_file()


def test_report_of_an_unverified_winner_says_how_to_verify(monkeypatch, capsys, studies, tmp_path) -> None:
    study = studies["plain"]
    code, stdout, stderr = sweeper(
        monkeypatch,
        capsys,
        "report",
        "--storage",
        study.url,
        "--study",
        study.name,
        "-o",
        str(tmp_path / "out"),
        "--json",
    )
    assert code == 0
    data = json.loads(stdout)
    assert data["status"] == "unverified" and "report.html" in data["files"]
    assert f"is UNVERIFIED: run 'sweeper verify --study plain --storage {study.url}'" in stderr


def test_verify_of_a_study_with_no_feasible_trial(monkeypatch, capsys, studies) -> None:
    study = studies["hopeless"]
    code, stdout, stderr = sweeper(monkeypatch, capsys, "verify", "--storage", study.url, "--study", study.name)
    assert code == 1 and stdout == ""
    assert stderr == (
        "error: study 'hopeless' has no feasible trial to verify (none of its 3 trials "
        "passed the PPL cap): nothing to verify\n"
    )


def test_verify_options_are_checked_before_anything_runs(monkeypatch, capsys, studies) -> None:
    study = studies["plain"]
    code, _, stderr = sweeper(monkeypatch, capsys, "verify", "--storage", study.url, "--tolerance", "5")
    assert code == 2
    assert stderr == "error: verify: tolerance must be a fraction between 0 and 1 (0.05 = 5 %), not 5.0\n"


def test_an_unknown_study_is_named(monkeypatch, capsys, studies) -> None:
    study = studies["plain"]
    code, _, stderr = sweeper(monkeypatch, capsys, "export", "--storage", study.url, "--study", "nope")
    assert code == 2  # a user error: the study name to fix
    assert stderr.startswith("error: no study named 'nope' in ") and stderr.count("\n") == 1


def test_import_shows_the_vidraft_manifest_plan(monkeypatch, capsys, challenge_data) -> None:
    manifest = challenge_data / "vidraft-fw188-ctk49-manifest.json"
    code, stdout, _ = sweeper(monkeypatch, capsys, "import", str(manifest), "--json")
    assert code == 0
    plan = json.loads(stdout)
    assert plan["space"] == "gemma4-e4b-a10g"
    assert plan["enqueued_params"] == {"sliding_window": 188, "centroid_top_k": 49, "num_speculative_tokens": 7}
    assert plan["enqueue_order"][0] == "imported:vidraft-fw188-ctk49-n64-patchbridge-v1"
    sources = {p["name"]: p["source"] for p in plan["searched"]}
    assert sources == {
        "sliding_window": "env HF_OVERRIDES.text_config.sliding_window",
        "centroid_top_k": "env CENTROID_TOP_K",
        "num_speculative_tokens": "env SPECULATIVE_CONFIG.num_speculative_tokens",
    }
    # everything the parameters do not write is kept as is in every trial
    assert plan["fixed"]["WARMUP_NUM_PROMPTS"] == "64" and plan["fixed"]["MAX_NUM_SEQS"] == "1"
    assert "SPECULATIVE_CONFIG" not in plan["fixed"] and "SLIDING_WINDOW" not in plan["fixed"]


def test_import_table_and_errors(monkeypatch, capsys, demo, challenge_data, tmp_path) -> None:
    code, stdout, _ = sweeper(monkeypatch, capsys, "import", str(demo.manifest))
    assert code == 0
    assert "first trial: imported:tiny-gemma4-demo {'sliding_window': 32, 'centroid_top_k': 8," in stdout
    # the plain baseline has no drafter: the challenge space cannot write into it
    code, _, stderr = sweeper(monkeypatch, capsys, "import", str(challenge_data / "baseline-manifest.json"))
    assert code == 2
    assert "has no SPECULATIVE_CONFIG to write it into" in stderr.splitlines()[-1]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"name": "x", "serve": ["python", "serve.py"], "model_id": "org/some-model"}))
    code, _, stderr = sweeper(monkeypatch, capsys, "import", str(other))
    assert code == 2
    assert stderr.endswith(
        "no preset fits its model 'org/some-model': name a search space with --space "
        "(a preset name or a YAML/TOML file)\n"
    )


def test_verify_needs_the_base_manifest_and_real_held_out_data(monkeypatch, capsys, synthetic, demo, tmp_path) -> None:
    bare = synthetic.make_study(tmp_path, name="bare", recipe=False)
    code, stdout, stderr = sweeper(monkeypatch, capsys, "verify", "--storage", bare.url)
    assert (code, stdout) == (2, "")
    assert stderr == (
        "error: the study does not record its base manifest: pass it with --manifest "
        "(the manifest the study was run on)\n"
    )
    code, _, stderr = sweeper(
        monkeypatch,
        capsys,
        "verify",
        "--storage",
        bare.url,
        "--manifest",
        str(demo.manifest),
        "--prompts",
        str(demo.prompts_tuning),
    )
    assert code == 2
    assert stderr == (
        f"error: the held-out prompts {demo.prompts_tuning} is the set the study tuned on: "
        "verification needs data the study never saw\n"
    )


def test_status_shows_the_verifications_and_the_answer(monkeypatch, capsys, synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path, name="checked")
    verify_study(
        VerifySettings(
            top=2, repeats=2, evaluate=synthetic.synthetic_evaluator(tps_factor=lambda r: 0.5 if r else 1.0)
        ),
        storage=study.url,
        study_name=study.name,
    )
    code, stdout, _ = sweeper(monkeypatch, capsys, "status", "--storage", study.url)
    assert code == 0
    best = study.number(synthetic.CONFIGS["C"])
    lines = stdout.splitlines()
    assert "verification on held-out data" in lines
    row = next(line for line in lines if f"#{best} " in line and "FAILED" in line)
    assert "174.00" in row and "130.50" in row and "-25.0%" in row and "2/2" in row
    assert (f"trial #{best} failed: median held-out TPS 130.50 is 25.0% below the tuned 174.00 (tolerance 5%)") in lines
    # both candidates failed; the next feasible trial, never verified, is the answer for now
    third = study.number(synthetic.CONFIGS["A"])
    assert lines[-1] == (
        f"answer: trial #{third}: TPS 147.00, PPL 2.1600, UNVERIFIED; not the study's "
        f"confirmed best (trial {best}, which failed verification): no speedup over "
        "the base manifest is claimed for it"
    )
    code, stdout, _ = sweeper(monkeypatch, capsys, "status", "--storage", study.url, "--json")
    assert json.loads(stdout)["verifications"][str(best)]["status"] == "failed"
