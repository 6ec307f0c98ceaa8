"""One TPS figure for the answer, and `sweeper run`'s closing block, on stored studies (no servers).

A study with a race: the contender's first server reads high (it is what picked it), its
re-measurements lower; the answer's figure is the geometric mean of the re-measurements,
recomputed from the stored trials (one_figure.expected_tps) and compared with what `run`,
`status` (text and JSON) and `export` print. Real SQLite and Optuna, scripted readings.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from search_spaces import space_from_dict
from storage import study_status
from sweeper.answer import VerifySettings, answer_tps, study_answer, verify_study
from sweeper.cli import app, run_cmd
from sweeper.cli._run_summary import closing_block, command_options
from sweeper.measure import duration_text
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, StudyResult, run_study


def _load(name: str):
    module_name = f"sweeper_cli_tests_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


one_figure = _load("one_figure")

CAP = 2.30
SPACE = space_from_dict(
    {
        "name": "race",
        "parameters": [
            {"name": "w", "type": "int", "low": 0, "high": 3, "affects": "quality", "default": 0, "env": "W"},
            {"name": "k", "type": "int", "low": 1, "high": 4, "affects": "speed", "default": 1, "env": "K"},
        ],
    },
    source="race.yaml",
).bind({})
# each configuration's readings in the order its servers run (repeated when more are asked)
READINGS = {(0, 1): [100.0, 101.5, 99.0, 100.8, 99.6], (0, 3): [141.0, 125.2, 123.9, 126.4, 124.8], (0, 2): [104.0]}
PPL = {0: 2.20}
# per-record PPL figures, so that the gate states the chance a re-run passes the cap
PPL_EXTRAS = {"ppl_stderr_records": 0.01, "ppl_records": 32}


def make_race_study(folder: Path, name: str = "race") -> str:
    used: dict[tuple[int, int], int] = {}

    def evaluate(params: Mapping[str, int], context) -> Measurement:
        key = (params["w"], params["k"])
        figures = READINGS[key]
        used[key] = used.get(key, -1) + 1
        return Measurement(tps=figures[used[key] % len(figures)], ppl=PPL[params["w"]], extras=PPL_EXTRAS)

    url = f"sqlite:///{folder / f'{name}.db'}"
    run_study(
        SPACE,
        evaluate,
        StudyOptions(
            study_name=name,
            storage=url,
            n_trials=3,
            gate=PplGate(cap=CAP, confidence=0.9, rerun_records=8),
            sampler="random",
            seed=0,
            enqueue=[{"w": 0, "k": 3}, {"w": 0, "k": 2}],
            enqueue_base=True,
            confirm=ConfirmSettings(rounds=2, noise=0.05, prior_df=2.0),
            handle_signals=False,
        ),
    )
    return url


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    url = make_race_study(tmp_path_factory.mktemp("race"))
    status = study_status(url, "race")
    answer = study_answer(status.trials, status.verifications, ConfirmSettings.from_settings(status.settings))
    return url, status, answer


def test_the_answer_is_the_raced_contender_and_its_figure_leaves_out_the_selecting_reading(race) -> None:
    _, status, answer = race
    now = answer.standing
    assert now is not None and now.incumbent is not None and dict(now.incumbent.params) == {"w": 0, "k": 3}
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    # the re-measurements only: the first reading (141.0) picked it and is left out
    readings = [r.tps for r in status.trials if dict(r.params) == {"w": 0, "k": 3}]
    assert readings[0] == 141.0 and len(readings) >= 3
    assert math.isclose(expected, math.exp(sum(map(math.log, readings[1:])) / len(readings[1:])))
    assert math.isclose(answer_tps(now).value, expected, rel_tol=1e-12)
    data = now.to_dict()
    assert math.isclose(data["incumbent"]["estimate"], expected, rel_tol=1e-12)
    all_readings = math.exp(sum(map(math.log, readings)) / len(readings))
    assert math.isclose(data["incumbent"]["estimate_all"], all_readings, rel_tol=1e-12)


def test_the_closing_block_is_short_and_says_what_was_found(race) -> None:
    url, status, answer = race
    now = answer.standing
    lines = closing_block(
        records=status.trials,
        now=now,
        settings=status.settings,
        stop_reason="n_trials",
        seconds=343.0,
        trials_run=len(status.trials),
        options=command_options(url, "race", name_study=True),
        verified=False,
    )
    one_figure.check_closing_block("\n".join(lines[:4]) + "\nnext: sweeper export")  # the commands are whole
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    one_figure.check_outputs(expected, run_text="\n".join(lines))
    races = sum(1 for r in status.trials if r.role.startswith("confirm"))
    searched = len(status.trials) - races
    assert (
        lines[0]
        == f"done: {len(status.trials)} servers ({searched} trials searched, {races} race servers) in 5 min 43 s"
    )
    trial = now.incumbent.first
    assert lines[1] == f"answer: trial {trial}: {expected:.1f} tok/s with w=0, k=3"
    speedup = now.speedup
    claim = f"{(speedup.value - 1) * 100:+.1f} %"
    assert lines[2].startswith(f"claim: {claim} ")
    assert f"({now.basis.study_confidence * 100:.0f} % " not in lines[2]  # the level is named once: study-wise
    assert f"study-wise 95 % interval {(speedup.low - 1) * 100:+.1f} % to {(speedup.high - 1) * 100:+.1f} %" in lines[2]
    record = next(r for r in status.trials if r.number == trial)
    probability = record.extras["ppl_pass_probability"]
    assert lines[3] == (
        f"PPL 2.2000 (cap 2.3000), passes a re-run on 8 new records with probability "
        f"{'above 0.99' if probability >= 0.995 else f'{probability:.2f}'}"
    )
    assert lines[4:] == [
        f"next: sweeper verify --storage {url} --study race",
        f"then: sweeper export --storage {url} --study race -o answer/manifest.json",
    ]


def test_the_closing_block_with_default_storage_and_a_verified_answer_is_one_next_line(race) -> None:
    _, status, answer = race
    lines = closing_block(
        records=status.trials,
        now=answer.standing,
        settings=status.settings,
        stop_reason="timeout",
        seconds=7500.0,
        trials_run=2,
        options=command_options("sweeper-study.db", "race", name_study=False),
        verified=True,
    )
    assert lines[0].startswith("stopped at the timeout: ") and lines[0].endswith(" in 2 h 05 min, 2 this run")
    assert lines[-1] == "next: sweeper export -o answer/manifest.json"
    assert [duration_text(s) for s in (0.4, 59.6, 60, 3599, 3600)] == [
        "0 s",
        "1 min 0 s",
        "1 min 0 s",
        "59 min 59 s",
        "1 h 00 min",
    ]


def test_long_settings_get_a_line_of_their_own_and_the_block_stays_within_120_columns(race) -> None:
    import dataclasses

    _, status, answer = race
    now = answer.standing
    long = {f"a_rather_long_parameter_name_{i}": 1000 + i for i in range(6)}
    wide = dataclasses.replace(now, incumbent=dataclasses.replace(now.incumbent, params=long))
    lines = closing_block(
        records=status.trials,
        now=wide,
        settings=status.settings,
        stop_reason="n_trials",
        seconds=1.0,
        trials_run=len(status.trials),
        options="",
        verified=False,
    )
    assert len(lines) <= 6 and all(len(line) <= 120 for line in lines)
    assert lines[1].startswith("answer: trial ") and lines[2].startswith("  with a_rather_long_parameter_name_0=1000")
    assert lines[2].endswith("...")


def test_status_text_and_json_state_the_one_figure(race) -> None:
    url, status, _ = race
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    text = CliRunner().invoke(app, ["status", "--storage", url])
    assert text.exit_code == 0, text.output
    as_json = CliRunner().invoke(app, ["status", "--storage", url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    one_figure.check_outputs(expected, status_text=text.output, status_json=json.loads(as_json.output))


def test_every_output_states_one_figure_and_the_base_divides_to_the_claim(race, demo, tmp_path) -> None:
    """status (text, JSON, --trial of the reading that selected it), the report (tile, summary.md,
    trials.csv) and export (message, description) state one figure for the answer, recomputed
    from the stored trials; the base's figure beside the claim divides with it to the claim."""
    url, status, _ = race
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    first = min(r.number for r in status.trials if dict(r.params) == {"w": 0, "k": 3})
    runner = CliRunner()
    text = runner.invoke(app, ["status", "--storage", url])
    as_json = runner.invoke(app, ["status", "--storage", url, "--json"])
    trial = runner.invoke(app, ["status", "--storage", url, "--trial", str(first)])
    report = runner.invoke(app, ["report", "--storage", url, "-o", str(tmp_path / "report")])
    exported = runner.invoke(
        app,
        ["export", "--storage", url, "--manifest", str(demo.manifest), "-o", str(tmp_path / "a.json")]
        + ["--allow-unverified"],
    )
    for result in (text, as_json, trial, report, exported):
        assert result.exit_code == 0, result.output
    assert "TPS 141.00 (this server's reading)" in trial.output  # its own reading, named as one
    assert "this reading is not counted" in trial.output
    trials_csv = (tmp_path / "report" / "trials.csv").read_text()
    one_figure.check_outputs(
        expected,
        status_text=text.output,
        status_json=json.loads(as_json.output),
        trial_text=trial.output,
        trials_csv=trials_csv,
        summary=(tmp_path / "report" / "summary.md").read_text(),
        page=(tmp_path / "report" / "report.html").read_text(),
        export_text=exported.stdout,
        description=json.loads((tmp_path / "a.json").read_text())["description"],
    )
    (selecting,) = [row for row in trials_csv.splitlines()[1:] if row.startswith(f"{first},")]
    assert ",141.0000," in selecting and ",selected it: not counted," in selecting
    pairs = one_figure.claim_pairs(status.trials, {"w": 0, "k": 3}, {"w": 0, "k": 1})
    one_figure.check_base_divides_to_the_claim(text.output, pairs)
    # and the base's reading that no round paired is shown, marked as not counted
    assert "100.0 (outside the claim's rounds: not counted)" in text.output


def test_status_json_holds_public_settings_the_caps_value_and_the_servers_by_kind(race, tmp_path) -> None:
    url, status, _ = race
    data = json.loads(CliRunner().invoke(app, ["status", "--storage", url, "--json"]).output)
    assert not [key for key in data["settings"] if "race-round" in key or key == "enqueued"], data["settings"]
    assert data["settings"]["noise"] == 0.05 and "noise_prior" not in data["settings"]
    assert data["settings"]["ppl_cap"] == CAP
    races = sum(1 for r in status.trials if r.role.startswith("confirm:"))
    assert {k: data["counts"][k] for k in ("searched", "race_servers", "verification_servers", "servers")} == {
        "searched": len(status.trials) - races,
        "race_servers": races,
        "verification_servers": 0,
        "servers": len(status.trials),
    }
    text = CliRunner().invoke(app, ["status", "--storage", url]).output
    assert (
        f"servers: {len(status.trials)} ({len(status.trials) - races} trials searched, {races} race servers, " in text
    )
    assert "verification: none yet: 'sweeper verify --study race --storage " in text


def test_status_json_states_a_relative_caps_value_once_the_baseline_is_measured(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'relative.db'}"
    run_study(
        SPACE,
        lambda params, context: Measurement(tps=100.0 + params["k"], ppl=2.15 + 0.01 * params["w"]),
        StudyOptions(
            study_name="relative",
            storage=url,
            n_trials=2,
            gate=PplGate(cap_rel=1.05),
            sampler="random",
            seed=0,
            enqueue=[{"w": 1, "k": 2}],
            enqueue_base=True,
            handle_signals=False,
        ),
    )
    baseline = next(r for r in study_status(url).trials if "baseline" in r.role.split("+"))
    data = json.loads(CliRunner().invoke(app, ["status", "--storage", url, "--json"]).output)
    assert data["settings"]["ppl_cap_rel"] == 1.05
    assert math.isclose(data["settings"]["ppl_cap"], 1.05 * baseline.ppl, rel_tol=1e-12)  # 2.2575, not null


def test_export_states_the_one_figure_in_its_refusal_message_and_description(race, tmp_path) -> None:
    url, status, _ = race
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    refused = CliRunner().invoke(app, ["export", "--storage", url, "-o", str(tmp_path / "a.json")])
    assert refused.exit_code == 1
    assert f"(TPS {expected:.2f}, PPL 2.2000), has not been verified" in str(refused.exception)
    assert "141.00" not in str(refused.exception)  # the reading that selected it


def test_export_and_status_of_a_missing_database_exit_2_naming_it(tmp_path) -> None:
    missing = tmp_path / "none.db"
    for command in (["status"], ["export"], ["verify"], ["report", "-o", str(tmp_path / "r")]):
        from sweeper.errors import ERROR_ROOTS

        result = CliRunner().invoke(app, [*command, "--storage", str(missing)])
        assert isinstance(result.exception, ERROR_ROOTS), (command, result.output)
        assert result.exception.exit_code == 2
        assert str(result.exception) == f"no study database at {missing} (see --storage)"
    assert not missing.exists()


def test_status_piped_to_a_file_keeps_each_table_row_on_one_line(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path, name="wide")  # params: sliding_window, centroid_top_k, ...
    verify_study(
        VerifySettings(top=2, repeats=2, evaluate=synthetic.synthetic_evaluator()),
        storage=study.url,
        study_name=study.name,
    )
    result = CliRunner().invoke(app, ["status", "--storage", study.url])  # not a terminal: 80 columns
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    tables = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert tables and all(len(line) <= 80 for line in tables), [line for line in tables if len(line) > 80]
    pareto = json.loads(CliRunner().invoke(app, ["status", "--storage", study.url, "--json"]).output)["pareto"]
    assert len(pareto) >= 2
    for row in pareto:
        number = row["number"]
        assert len([line for line in lines if line.startswith(f"│ {number:>5} │")]) == 1, number
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
        assert f"  trial {number}: {params}" in lines  # the params, one line per configuration
    checked = json.loads(CliRunner().invoke(app, ["status", "--storage", study.url, "--json"]).output)["verifications"]
    assert len(checked) == 2
    for number in map(int, checked):
        assert len([line for line in lines if line.startswith(f"│ {f'#{number}':>5} │")]) == 1, number


def test_status_in_a_wide_console_keeps_the_params_in_the_table(synthetic, tmp_path) -> None:
    import io

    from rich.console import Console

    from sweeper.cli._trial_view import print_trial_table

    study = synthetic.make_study(tmp_path, name="roomy")
    records = study_status(study.url, study.name).pareto
    out = io.StringIO()
    print_trial_table(Console(file=out, width=160), "Pareto", records, {})
    rows = [line for line in out.getvalue().splitlines() if line.startswith("│")]
    assert len(rows) == len(records)
    for row, record in zip(rows, records):
        assert row.split("│")[-2].strip() == ", ".join(f"{k}={v}" for k, v in record.params.items())


def test_export_of_the_raced_answer_states_the_one_figure_and_keeps_the_users_path(
    race, demo, tmp_path, monkeypatch
) -> None:
    url, status, _ = race
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["export", "--storage", url, "--manifest", str(demo.manifest), "-o", "out/x.json", "--allow-unverified"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("wrote out/x.json (")  # the path as the user wrote it
    assert lines[-1] == "  run it with: sweeper serve out/x.json"  # the manifest serves itself with sweeper
    written = json.loads((tmp_path / "out" / "x.json").read_text())
    assert written["serve"] == ["sweeper", "serve", "x.json"]
    one_figure.check_outputs(expected, export_text=result.stdout, description=written["description"])
    as_json = CliRunner().invoke(
        app,
        [
            "export",
            "--storage",
            url,
            "--manifest",
            str(demo.manifest),
            "-o",
            "out/y.json",
            "--allow-unverified",
            "--json",
        ],
    )
    assert math.isclose(json.loads(as_json.stdout)["tps"], expected, rel_tol=1e-12)


def test_export_names_the_manifests_own_serve_command_and_keeps_a_linked_drafters_spelling(
    synthetic, demo, tmp_path, monkeypatch
) -> None:
    entry = tmp_path / "entry"
    (entry / "weights").mkdir(parents=True)
    (entry / "weights" / "drafter").symlink_to(demo.drafter, target_is_directory=True)
    (entry / "model").symlink_to(demo.model, target_is_directory=True)
    (entry / "serve.py").write_text("# the entrant's own server\n")
    data = json.loads(demo.manifest.read_text())
    data["serve"] = ["python", "serve.py"]
    spec = json.loads(data["env"]["SPECULATIVE_CONFIG"])
    data["env"]["SPECULATIVE_CONFIG"] = json.dumps({**spec, "model": "weights/drafter"})
    (entry / "manifest.json").write_text(json.dumps(data))
    study = synthetic.make_study(tmp_path, name="entrant", base_manifest=entry / "manifest.json")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["export", "--storage", study.url, "-o", "answer/manifest.json", "--allow-unverified"]
    )
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "answer" / "manifest.json").read_text())
    # exported elsewhere: absolute, in the entrant's own spelling, the link kept (not its target)
    drafter = json.loads(written["env"]["SPECULATIVE_CONFIG"])["model"]
    assert drafter == str(entry / "weights" / "drafter") != str(demo.drafter.resolve())
    assert written["env"]["MODEL_ID"] == str(entry / "model")
    assert written["serve"] == ["python", str(entry / "serve.py")]
    # the hint is how this manifest runs: its own command, from its folder, with its env
    assert result.stdout.splitlines()[-1] == (
        f"  run it as the harness does: in answer, python {entry / 'serve.py'} with the manifest's env"
    )
    assert "sweeper serve" not in result.stdout


def test_the_report_states_the_one_figure(race, tmp_path) -> None:
    url, status, _ = race
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    result = CliRunner().invoke(app, ["report", "--storage", url, "-o", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    one_figure.assert_one_figure(
        expected, one_figure.printed(result.stdout, r"winner: trial #\d+: TPS (\d+\.\d+)"), "report"
    )
    for page in ("summary.md", "report.html"):  # as the real-vLLM end-to-end run checks them
        assert f"{expected:.1f}" in (tmp_path / "report" / page).read_text(), page


def test_a_storage_that_is_not_a_database_url_and_an_unnamed_study_exit_2(race, tmp_path) -> None:
    import optuna

    from sweeper.errors import ERROR_ROOTS

    result = CliRunner().invoke(app, ["status", "--storage", "postgresql://::bad"])
    assert isinstance(result.exception, ERROR_ROOTS) and result.exception.exit_code == 2
    assert str(result.exception).startswith("not a database URL: 'postgresql://::bad'")
    url = f"sqlite:///{tmp_path / 'two.db'}"
    for name in ("one", "two"):
        optuna.create_study(study_name=name, storage=url)
    result = CliRunner().invoke(app, ["export", "--storage", url])
    assert isinstance(result.exception, ERROR_ROOTS) and result.exception.exit_code == 2
    assert str(result.exception) == f"{url} holds 2 studies (one, two): name one with --study"


def test_sweeper_run_ends_with_the_closing_block_and_verbose_adds_the_derivation(demo, tmp_path, monkeypatch) -> None:
    """`sweeper run` itself, its server work replaced by the scripted race study (run_study, real SQLite)."""
    import types

    url = f"sqlite:///{tmp_path / 'race.db'}"

    def prepare(plan):
        return types.SimpleNamespace(
            trials_done=0,
            study_name="race",
            space=types.SimpleNamespace(name="race", names=("w", "k")),
            gate=types.SimpleNamespace(describe=lambda: "PPL <= 2.3"),
            manifest=types.SimpleNamespace(env={}),
        )

    def execute(prepared, progress=None):
        make_race_study(tmp_path)
        status = study_status(url, "race")
        return StudyResult(
            study_name="race", storage=url, stop_reason="n_trials", trials_run=len(status.trials), status=status
        )

    monkeypatch.setattr(run_cmd, "prepare", prepare)
    monkeypatch.setattr(run_cmd, "execute", execute)
    monkeypatch.chdir(tmp_path)  # the storage as a user types it: a file in the current folder
    args = ["run", "--manifest", str(demo.manifest), "--prompts", str(demo.prompts_tuning)]
    args += ["--ppl-data", str(demo.ppl_tuning), "--storage", "race.db", "--study", "race", "--plain"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = one_figure.check_closing_block(result.stdout)
    status = study_status(url, "race")
    expected = one_figure.expected_tps(status.trials, {"w": 0, "k": 3})
    one_figure.check_outputs(expected, run_text=result.stdout)
    assert lines[-2:] == [  # together they would pass 120 columns
        "next: sweeper verify --storage race.db --study race",
        "then: sweeper export --storage race.db --study race -o answer/manifest.json",
    ]
    (tmp_path / "race.db").unlink()
    verbose = CliRunner().invoke(app, [*args, "--verbose"])
    assert verbose.exit_code == 0, verbose.output
    derivation = verbose.stdout.splitlines()[: -len(lines)]
    assert derivation[0].startswith("best: trial ") and any(line.startswith("claim rests on: ") for line in derivation)
    assert any(line.startswith("pareto: trial ") for line in derivation)
    assert verbose.stdout.splitlines()[-len(lines) + 1 :] == lines[1:]  # the same block after it
