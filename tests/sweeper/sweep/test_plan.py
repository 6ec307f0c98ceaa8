"""``sweeper run`` before any server starts: the data a run needs, its sizes, its argument
errors, the held-out split in the recipe, --keep-port and --server-python. No server here."""

from __future__ import annotations

import hashlib
import json
import socket
import sys
from pathlib import Path

import pytest

from evaluators import TpsSettings, WarmupSettings, load_ppl_records, load_prompts
from sweeper.answer import VerifySettings, heldout_data, heldout_evaluator, heldout_settings, verify_study
from sweeper.cli import main
from sweeper.errors import USER_INPUT_ERRORS, ServerError, UserInputError
from sweeper.study import (
    ConfirmSettings,
    PplGate,
    StudyOptions,
    StudyOptionsError,
    StudyRecipe,
    recipe_from_settings,
    run_study,
    save_recipe,
)
from sweeper.sweep import CHALLENGE_SIZES, DEMO_SIZES, RunPlan, RunSizes, prepare


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


def run_args(tmp_path: Path, *args: str) -> list[str]:
    return ["run", "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--run-dir", str(tmp_path / "runs"), *args]


def nothing_written(tmp_path: Path) -> bool:
    return not (tmp_path / "study.db").exists() and not (tmp_path / "runs").exists()


# -- the data a non-demo run needs ------------------------------------------------------------


def test_a_non_demo_manifest_without_data_is_one_line_naming_the_options(
    monkeypatch, capsys, tmp_path, user_setup
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = sweeper(monkeypatch, capsys, *run_args(tmp_path, "--manifest", str(user_setup.manifest)))
    assert (code, out) == (2, "")
    assert err == (
        f"error: a run of {user_setup.manifest} needs its data: --prompts and --ppl-data (a file or "
        "hub dataset id each, as 'sweeper eval' takes them), and held-out data for verify: "
        "--heldout-prompts and --heldout-ppl-data, or --heldout-fraction F [--split-seed S] to "
        "split it off the tuning data\n"
    )
    assert nothing_written(tmp_path) and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]

    # the tuning data alone is not enough: the night's answer has to be verifiable
    code, out, err = sweeper(
        monkeypatch,
        capsys,
        *run_args(tmp_path, "--manifest", str(user_setup.manifest), *user_setup.data_args(heldout=False)),
    )
    assert (code, out) == (2, "")
    assert err.startswith(
        f"error: a run of {user_setup.manifest} needs held-out data for verify: "
        "--heldout-prompts and --heldout-ppl-data, or --heldout-fraction F"
    )
    assert err.count("\n") == 1 and nothing_written(tmp_path)

    # one held-out set given: only the other one is asked for
    code, out, err = sweeper(
        monkeypatch,
        capsys,
        *run_args(
            tmp_path,
            "--manifest",
            str(user_setup.manifest),
            *user_setup.data_args(heldout=False),
            "--heldout-prompts",
            str(user_setup.heldout_prompts),
        ),
    )
    assert code == 2 and "for verify: --heldout-ppl-data, or --heldout-fraction" in err
    assert nothing_written(tmp_path)


def test_the_readme_night_without_data_is_refused_on_a_challenge_manifest(
    monkeypatch, capsys, tmp_path, challenge_data
) -> None:
    manifest = challenge_data / "vidraft-fw188-ctk49-manifest.json"
    monkeypatch.chdir(tmp_path)
    code, out, err = sweeper(
        monkeypatch,
        capsys,
        *run_args(tmp_path, "--manifest", str(manifest), "--ppl-cap", "2.42", "--timeout", "8h", "--verify-top", "3"),
    )
    assert (code, out) == (2, "")
    assert err.startswith(f"error: a run of {manifest} needs its data: --prompts and --ppl-data")
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_the_challenge_prompts_split_into_disjoint_reproducible_parts(challenge_data) -> None:
    from sweeper.measure import DataSplit

    prompts = load_prompts(challenge_data / "eval_prompts_sharegpt.json")
    records = load_ppl_records(challenge_data / "ppl_ground_truth_tokens.jsonl")
    assert (len(prompts), len(records)) == (128, 128)
    for data in (prompts, records):
        ids = [item.id for item in data]
        tuning = DataSplit(heldout_fraction=0.25, seed=0).of(data)
        heldout = DataSplit(heldout_fraction=0.25, seed=0, part="heldout").of(data)
        assert (len(tuning), len(heldout)) == (96, 32)
        assert {i.id for i in heldout} == expected_heldout_ids(ids, 0.25, 0)
        assert {i.id for i in tuning} | {i.id for i in heldout} == set(ids)
        assert [i.id for i in DataSplit(heldout_fraction=0.25, seed=0).of(data)] == [i.id for i in tuning]


def test_the_demo_keeps_its_bundled_sets(demo, tmp_path) -> None:
    prepared = prepare(RunPlan(storage=f"sqlite:///{tmp_path / 'study.db'}", run_dir=str(tmp_path / "runs")))
    recipe = prepared.recipe
    assert (recipe.prompts, recipe.ppl_data) == (str(demo.prompts_tuning), str(demo.ppl_tuning))
    assert (recipe.heldout_prompts, recipe.heldout_ppl_data) == (str(demo.prompts_heldout), str(demo.ppl_heldout))
    assert recipe.heldout_fraction is None
    tuning = json.loads(demo.prompts_tuning.read_text())
    heldout = json.loads(demo.prompts_heldout.read_text())
    assert recipe.data_counts == {
        "prompts": len(tuning),
        "ppl_records": len(demo.ppl_tuning.read_text().splitlines()),
        "heldout_prompts": len(heldout),
        "heldout_ppl_records": len(demo.ppl_heldout.read_text().splitlines()),
    }
    assert nothing_written(tmp_path)


# -- sizes and the trial budget ------------------------------------------------------------------


def test_sizes_are_the_demo_preset_on_the_demo_and_the_challenges_elsewhere(user_setup) -> None:
    assert RunPlan().sizes == DEMO_SIZES == RunSizes(num_prompts=8, output_len=128, warmup_requests=1)
    own = RunPlan(manifest=str(user_setup.manifest))
    challenge = TpsSettings()  # the evaluators' defaults are the challenge harness's
    assert own.sizes == CHALLENGE_SIZES
    assert (own.sizes.num_prompts, own.sizes.output_len, own.sizes.warmup_requests) == (128, 512, 4)
    assert (challenge.num_prompts, challenge.output_len, challenge.warmup_requests) == (128, 512, 4)
    given = RunPlan(manifest=str(user_setup.manifest), num_prompts=16, warmup_requests=0)
    assert given.sizes == RunSizes(num_prompts=16, output_len=512, warmup_requests=0)


@pytest.mark.parametrize(
    ("is_demo", "n_trials", "timeout", "budget"),
    [
        (True, None, None, 4),
        (True, None, "8h", 4),  # the demo keeps its 4 trials
        (False, None, None, 8),
        (False, None, "8h", None),  # a night: until the timeout
        (False, 40, "8h", 40),
        (True, 3, None, 3),
    ],
)
def test_the_trial_budget(user_setup, is_demo, n_trials, timeout, budget) -> None:
    plan = RunPlan(manifest=None if is_demo else str(user_setup.manifest), n_trials=n_trials, timeout=timeout)
    assert plan.trial_budget == budget


def test_every_size_is_in_the_recipe_and_shown_by_status(monkeypatch, capsys, synthetic, user_setup, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    plan = RunPlan(
        manifest=str(user_setup.manifest),
        storage=url,
        run_dir=str(tmp_path / "runs"),
        **_data(user_setup),
        heldout_fraction=0.25,
        split_seed=3,
        ppl_max_records=12,
        ready_timeout_s=300.0,
    )
    prepared = prepare(plan)
    recipe = prepared.recipe
    bridge = WarmupSettings()  # the manifest sets no WARMUP_*: the bridge's defaults
    assert (recipe.num_prompts, recipe.output_len, recipe.warmup_requests) == (128, 512, 4)
    assert (recipe.warmup_prompts, recipe.ppl_records, recipe.ready_timeout_s) == (bridge.num_prompts, 12, 300.0)
    assert (recipe.heldout_fraction, recipe.split_seed) == (0.25, 3)
    assert recipe.heldout_prompts is None and recipe.heldout_ppl_data is None
    assert recipe.prompts == str(user_setup.prompts) and recipe.base_manifest == str(user_setup.manifest)
    # stored in a real study and read back by `sweeper status`
    _synthetic_study(synthetic, url, prepared.study_name, recipe)
    code, out, err = sweeper(monkeypatch, capsys, "status", "--storage", url, "--study", prepared.study_name)
    assert code == 0, err
    n_prompts = len(json.loads(user_setup.prompts.read_text()))
    n_records = len(user_setup.ppl_data.read_text().splitlines())
    held_prompts, held_records = round(n_prompts * 0.25), round(n_records * 0.25)
    assert ("sizes: 128 prompts x 512 tokens, 4 warm-up requests, warm-up bridge 64 prompts, PPL records 12\n") in out
    assert (
        f"tuning data: prompts {user_setup.prompts} ({n_prompts - held_prompts}), "
        f"PPL {user_setup.ppl_data} ({n_records - held_records} records)\n"
    ) in out
    assert (
        f"held-out data: prompts 0.25 split off the tuning set (seed 3) ({held_prompts}); "
        f"PPL 0.25 split off the tuning set (seed 3) ({held_records} records)\n"
    ) in out
    assert "servers: ready timeout 300 s" in out


def test_a_study_resumed_with_other_sizes_or_data_is_refused(synthetic, user_setup, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    plan = RunPlan(manifest=str(user_setup.manifest), storage=url, **_data(user_setup), heldout_fraction=0.25)
    prepared = prepare(plan)
    _synthetic_study(synthetic, url, prepared.study_name, prepared.recipe)
    assert prepare(plan).recipe == prepared.recipe  # the same command resumes
    with pytest.raises(UserInputError) as refused:
        prepare(
            RunPlan(
                manifest=str(user_setup.manifest),
                storage=url,
                **_data(user_setup),
                heldout_fraction=0.25,
                num_prompts=8,
                split_seed=2,
            )
        )
    assert str(refused.value) == (
        f"study {prepared.study_name!r} was measured with other settings than this run's "
        "(split_seed 0 -> 2; num_prompts 128 -> 8): its trials would not be comparable; run it "
        "with the options it was started with, or start another study with --study NAME"
    )


def test_a_resumed_study_measures_tps_with_its_own_connection_protocol(synthetic, user_setup, tmp_path) -> None:
    """A new study records the default (a connection per request, as the harness's client);
    one stored before the protocol was recorded measured on one keep-alive connection, and
    its new trials and its verification do the same."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    plan = RunPlan(manifest=str(user_setup.manifest), storage=url, **_data(user_setup), heldout_fraction=0.25)
    prepared = prepare(plan)
    assert prepared.recipe.tps_connection == "harness" == prepared.evaluator.settings.tps.connection
    older = StudyRecipe.from_attr({k: v for k, v in prepared.recipe.to_attr().items() if k != "tps_connection"})
    assert older.tps_connection is None and older.connection == "keep-alive"
    _synthetic_study(synthetic, url, prepared.study_name, older)
    resumed = prepare(plan)
    assert resumed.evaluator.settings.tps.connection == "keep-alive"
    assert resumed.recipe.tps_connection == "keep-alive"
    assert heldout_settings(older, heldout_data(older)).tps.connection == "keep-alive"
    assert heldout_settings(prepared.recipe, heldout_data(prepared.recipe)).tps.connection == "harness"


def test_prepare_reads_an_existing_study_through_one_connection_and_hands_typed_options_down(
    synthetic, user_setup, tmp_path, monkeypatch
) -> None:
    import sqlalchemy

    from storage import TrialStore

    url = f"sqlite:///{tmp_path / 'study.db'}"
    plan = RunPlan(manifest=str(user_setup.manifest), storage=url, **_data(user_setup), heldout_fraction=0.25)
    _synthetic_study(synthetic, url, prepare(plan).study_name, prepare(plan).recipe)
    with TrialStore(url) as store:
        done = store.count(prepare(plan).study_name, ("complete", "failed"))
    assert done == len(synthetic.CONFIGS) + 1

    opened: list[str] = []
    real = sqlalchemy.engine.create_engine

    def counting(engine_url, *args, **kwargs):
        opened.append(str(engine_url))
        return real(engine_url, *args, **kwargs)

    # ours call sqlalchemy.create_engine, Optuna's storage sqlalchemy.engine.create_engine
    monkeypatch.setattr(sqlalchemy, "create_engine", counting)
    monkeypatch.setattr(sqlalchemy.engine, "create_engine", counting)
    prepared = prepare(plan)
    assert opened == [url]
    assert prepared.trials_done == done

    options = prepared.options
    # the study stored a point-estimate gate: the plan's cap with the stored confidence (none)
    assert (prepared.ppl_confidence, prepared.ppl_rerun_records) == (None, None)
    assert options.gate == PplGate(cap_rel=1.05) == prepared.gate
    assert options.confirm == ConfirmSettings(rounds=6, noise=0.10)
    assert (options.study_name, options.storage, options.n_trials) == (prepared.study_name, url, 8)
    assert options.enqueue_base and options.enqueue == ()


def test_a_bad_confirmation_option_is_named_by_its_command_line_flag() -> None:
    with pytest.raises(UserInputError) as rounds:
        RunPlan(confirm_rounds=-1)
    assert str(rounds.value) == "--confirm-rounds: confirm rounds must be a whole number >= 0, not -1"
    with pytest.raises(UserInputError) as noise:
        RunPlan(noise=1.5)
    assert str(noise.value) == "--noise: noise (the prior between-server spread) must be in (0, 1), not 1.5"


def test_run_study_takes_its_options_only(tmp_path) -> None:
    from search_spaces import load_preset

    options = StudyOptions(study_name="s", storage=f"sqlite:///{tmp_path / 'study.db'}")
    with pytest.raises(TypeError):
        run_study(load_preset("tiny-cpu"), lambda params: None, options, n_trials=2)  # type: ignore[call-arg]
    with pytest.raises(StudyOptionsError, match=r"^run_study: options must be StudyOptions, not dict$"):
        run_study(load_preset("tiny-cpu"), lambda params: None, {"study_name": "s"})  # type: ignore[arg-type]
    assert not (tmp_path / "study.db").exists()


# -- the confidence gate: chosen for a new study, kept on resume -----------------------------------


def test_the_confidence_gate_is_chosen_for_a_new_study_and_kept_on_resume(synthetic, user_setup, tmp_path) -> None:
    from search_spaces import load_preset
    from sweeper.manifest import Manifest

    url = f"sqlite:///{tmp_path / 'study.db'}"
    heldout_records = len(user_setup.heldout_ppl_data.read_text().splitlines())

    def plan(**options) -> RunPlan:
        return RunPlan(manifest=str(user_setup.manifest), storage=url, **_data(user_setup, heldout=True), **options)

    def gate(**options) -> tuple[float | None, int | None]:
        prepared = prepare(plan(**options))
        return prepared.ppl_confidence, prepared.ppl_rerun_records

    # a new study: 90 % under an absolute cap, on as many new records as verify scores
    assert gate(ppl_cap=2.42) == (0.9, heldout_records)
    assert gate(ppl_cap=2.42, ppl_max_records=4) == (0.9, 4)
    assert gate(ppl_cap=2.42, ppl_confidence="95%", ppl_rerun_records=64) == (0.95, 64)
    assert gate(ppl_cap=2.42, ppl_confidence="none") == (None, None)
    assert gate() == (0.9, heldout_records)  # a relative cap: 90 % as well (docs/study.md, "The gate")
    assert gate(ppl_confidence=0.8) == (0.8, heldout_records)
    assert gate(ppl_rerun_records=16) == (0.9, 16)
    with pytest.raises(UserInputError, match="^--ppl-rerun-records: only a confidence gate uses it, and "):
        gate(ppl_confidence="none", ppl_rerun_records=16)
    assert not (tmp_path / "study.db").exists()  # nothing is written before the study runs

    # the study exists, gated at 95 % on 64 records: a resume keeps that
    first = prepare(plan(ppl_cap=2.42, ppl_confidence=0.95, ppl_rerun_records=64))
    space = load_preset("tiny-cpu").bind(Manifest.load(str(user_setup.manifest)).env)
    run_study(
        space,
        synthetic.synthetic_evaluator(),
        StudyOptions(
            study_name=first.study_name,
            storage=url,
            n_trials=1,
            gate=PplGate(cap=2.42, confidence=first.ppl_confidence, rerun_records=first.ppl_rerun_records),
            handle_signals=False,
        ),
    )
    save_recipe(url, first.study_name, first.recipe)
    assert gate(ppl_cap=2.42) == (0.95, 64)
    assert gate(ppl_cap=2.42, ppl_confidence="0.95", ppl_rerun_records=64) == (0.95, 64)
    started = (
        f"study {first.study_name!r} was started with the gate PPL <= 2.42 at 95 % confidence on 64 "
        "new records: resume it without the option (it keeps its own), or start another study with "
        "--study NAME"
    )
    for options, given in (
        ({"ppl_confidence": 0.9}, "--ppl-confidence 0.9"),
        ({"ppl_confidence": "none"}, "--ppl-confidence none"),
        ({"ppl_rerun_records": 16}, "--ppl-rerun-records 16"),
    ):
        with pytest.raises(UserInputError) as refused:
            gate(ppl_cap=2.42, **options)
        assert str(refused.value) == f"{given}: {started}"

    # a study gated on the point estimate (one made before there was a confidence gate) stays so
    old = "point-gate"
    run_study(
        space,
        synthetic.synthetic_evaluator(),
        StudyOptions(study_name=old, storage=url, n_trials=1, gate=PplGate(cap=2.42), handle_signals=False),
    )
    assert gate(ppl_cap=2.42, study_name=old) == (None, None)


def test_run_refuses_another_confidence_on_resume_in_one_line(
    monkeypatch, capsys, synthetic, user_setup, tmp_path
) -> None:
    from search_spaces import load_preset
    from sweeper.manifest import Manifest

    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = load_preset("tiny-cpu").bind(Manifest.load(str(user_setup.manifest)).env)
    run_study(
        space,
        synthetic.synthetic_evaluator(),
        StudyOptions(
            study_name="mine",
            storage=url,
            n_trials=1,
            gate=PplGate(cap=2.42, confidence=0.9, rerun_records=16),
            handle_signals=False,
        ),
    )
    args = [
        "run",
        "--manifest",
        str(user_setup.manifest),
        *user_setup.data_args(),
        "--study",
        "mine",
        "--storage",
        url,
        "--run-dir",
        str(tmp_path / "runs"),
        "--ppl-cap",
        "2.42",
    ]
    code, out, err = sweeper(monkeypatch, capsys, *args, "--ppl-confidence", "0.95")
    assert (code, out) == (2, "")
    assert err == (
        "error: --ppl-confidence 0.95: study 'mine' was started with the gate PPL <= 2.42 at 90 % "
        "confidence on 16 new records: resume it without the option (it keeps its own), or start "
        "another study with --study NAME\n"
    )
    assert not (tmp_path / "runs").exists()


# -- the held-out split ---------------------------------------------------------------------------


def expected_heldout_ids(ids: list[str], fraction: float, seed: int) -> set[str]:
    """The split's definition, computed here on its own: the lowest hashes of seed:id."""
    ranked = sorted(ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    return set(ranked[: round(len(ids) * fraction)])


def test_the_heldout_split_is_disjoint_recorded_and_reproduced_by_verify(synthetic, user_setup, tmp_path) -> None:
    from storage import study_status

    url = f"sqlite:///{tmp_path / 'study.db'}"
    plan = RunPlan(
        manifest=str(user_setup.manifest),
        storage=url,
        run_dir=str(tmp_path / "runs"),
        **_data(user_setup),
        heldout_fraction=0.25,
        split_seed=7,
    )
    prepared = prepare(plan)
    prompt_ids = [str(r["id"]) for r in json.loads(user_setup.prompts.read_text())]
    record_ids = [json.loads(line)["id"] for line in user_setup.ppl_data.read_text().splitlines()]
    held_prompts = expected_heldout_ids(prompt_ids, 0.25, 7)
    held_records = expected_heldout_ids(record_ids, 0.25, 7)
    tuning = prepared.evaluator.data
    assert [p.id for p in tuning.prompts] == [i for i in prompt_ids if i not in held_prompts]  # file order kept
    assert {r.id for r in tuning.ppl_records} == set(record_ids) - held_records

    # what verify measures on, from the recipe as stored in the study
    _synthetic_study(synthetic, url, prepared.study_name, prepared.recipe)
    stored = recipe_from_settings(study_status(url, prepared.study_name).settings)
    assert stored == prepared.recipe
    evaluator, info = heldout_evaluator(stored, run_dir=tmp_path / "verify")
    heldout = evaluator.template.data
    assert {p.id for p in heldout.prompts} == held_prompts
    assert {r.id for r in heldout.ppl_records} == held_records
    assert not {p.id for p in heldout.prompts} & {p.id for p in tuning.prompts}
    assert info["prompts_split"] == {"heldout_fraction": 0.25, "seed": 7, "part": "heldout"}
    assert (info["heldout_prompts"], info["heldout_ppl_records"]) == (len(held_prompts), len(held_records))

    # the same seed gives the same split; another seed another one
    again = prepare(plan).evaluator.data
    assert [p.id for p in again.prompts] == [p.id for p in tuning.prompts]
    other = prepare(
        RunPlan(
            manifest=str(user_setup.manifest),
            storage=url,
            **_data(user_setup),
            heldout_fraction=0.25,
            split_seed=8,
            study_name="other",
        )
    ).evaluator.data
    assert {p.id for p in other.prompts} != {p.id for p in tuning.prompts}


def test_a_fraction_that_leaves_no_heldout_record_is_refused_before_any_server(user_setup, tmp_path) -> None:
    n_prompts = len(json.loads(user_setup.prompts.read_text()))
    fraction = 0.4 / n_prompts  # rounds to no prompt at all
    with pytest.raises(
        USER_INPUT_ERRORS,
        match=rf"my-prompts.json: a held-out fraction of {fraction:g} of its "
        rf"{n_prompts} records leaves the heldout part empty",
    ):
        prepare(
            RunPlan(
                manifest=str(user_setup.manifest),
                storage=f"sqlite:///{tmp_path / 'study.db'}",
                **_data(user_setup),
                heldout_fraction=fraction,
            )
        )
    assert not (tmp_path / "study.db").exists()


def test_verify_top_on_user_data_verifies_on_the_split_off_part(synthetic, user_setup, tmp_path) -> None:
    """The path `run --verify-top` takes after the sweep, with the synthetic evaluator in
    place of servers: verify finds the held-out data in the recipe alone."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    prepared = prepare(
        RunPlan(manifest=str(user_setup.manifest), storage=url, **_data(user_setup), heldout_fraction=0.5)
    )
    study = _synthetic_study(synthetic, url, prepared.study_name, prepared.recipe)
    result = verify_study(
        VerifySettings(
            top=1,
            repeats=2,
            evaluate=synthetic.synthetic_evaluator(),
            base_manifest=prepared.manifest,
            recipe=prepared.recipe,
        ),
        storage=url,
        study_name=study.name,
    )
    (verification,) = result.verifications
    best_tps = synthetic.synthetic_tps(synthetic.CONFIGS["C"])
    assert verification.status == "verified" and synthetic.isclose(verification.median_tps, best_tps)


def test_given_heldout_sets_are_recorded_and_must_not_be_the_tuning_sets(user_setup, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    prepared = prepare(RunPlan(manifest=str(user_setup.manifest), storage=url, **_data(user_setup, heldout=True)))
    assert prepared.recipe.heldout_prompts == str(user_setup.heldout_prompts)
    assert prepared.recipe.heldout_fraction is None
    with pytest.raises(UserInputError, match="is the set the study tuned on"):
        prepare(
            RunPlan(
                manifest=str(user_setup.manifest),
                storage=url,
                prompts=str(user_setup.prompts),
                ppl_data=str(user_setup.ppl_data),
                heldout_prompts=str(user_setup.prompts),
                heldout_ppl_data=str(user_setup.heldout_ppl_data),
            )
        )
    assert not (tmp_path / "study.db").exists()


# -- argument errors: one line, before any output, nothing written ---------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n-trials", "-3"], "--n-trials must be a positive integer, not -3"),
        (["--n-trials", "0"], "--n-trials must be a positive integer, not 0"),
        (["--timeout", "soon"], "--timeout: cannot read 'soon' (examples: 8h, 90m, 1h30m)"),
        (["--num-prompts", "0"], "--num-prompts must be a positive integer, not 0"),
        (["--warmup-requests", "-1"], "--warmup-requests must be a non-negative integer, not -1"),
        (["--verify-top", "-1"], "--verify-top must be a non-negative integer, not -1"),
        (["--ready-timeout", "0"], "--ready-timeout must be a positive number of seconds, not 0.0"),
        (
            ["--heldout-fraction", "1.5"],
            "--heldout-fraction must be a fraction between 0 and 1 (0.25 = a quarter), not 1.5",
        ),
        (["--ppl-cap-rel", "0.9"], "--ppl-cap-rel must be at least 1.0, not 0.9"),
        (
            ["--server-python", "/no/such/python"],
            "--server-python /no/such/python: is not an executable Python interpreter",
        ),
        (
            ["--server-python", sys.executable, "--server-venv"],
            "--server-python and --server-venv: give one of them, not both",
        ),
        (["--quiet", "--plain"], "--quiet and --plain: give one of them, not both"),
        (["--enqueue", "sliding_window"], "--enqueue 'sliding_window': expected name=value[,name=value...]"),
        (
            ["--ppl-confidence", "1.5"],
            "--ppl-confidence must be a level from 0.5 to below 1 (0.9 or 90%), or none for the point estimate, not '1.5'",
        ),
        (
            ["--ppl-confidence", "100%"],
            "--ppl-confidence must be a level from 0.5 to below 1 (0.9 or 90%), or none for the point estimate, not '100%'",
        ),
        (
            ["--ppl-confidence", "high"],
            "--ppl-confidence must be a level from 0.5 to below 1 (0.9 or 90%), or none for the point estimate, not 'high'",
        ),
        (["--ppl-rerun-records", "0"], "--ppl-rerun-records must be a positive integer, not 0"),
        (
            ["--ppl-confidence", "none", "--ppl-rerun-records", "16"],
            "--ppl-rerun-records: only a confidence gate uses it, and --ppl-confidence is none (the point estimate is judged as measured)",
        ),
    ],
)
def test_run_argument_errors_come_before_any_output(monkeypatch, capsys, tmp_path, args, message) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = sweeper(monkeypatch, capsys, *run_args(tmp_path, *args))
    assert (code, out, err) == (2, "", f"error: {message}\n")
    assert nothing_written(tmp_path)


# -- --keep-port and --server-python -------------------------------------------------------------


def test_keep_port_refuses_a_busy_manifest_port_before_any_server(monkeypatch, capsys, tmp_path, make_user) -> None:
    busy = _busy_port()
    try:
        port = busy.getsockname()[1]
        user = make_user("busy", port=port)
        monkeypatch.chdir(tmp_path)
        code, out, err = sweeper(
            monkeypatch, capsys, *run_args(tmp_path, "--manifest", str(user.manifest), *user.data_args(), "--keep-port")
        )
        assert (code, out) == (2, "")
        assert err == (
            f"error: --keep-port: port {port} of {user.manifest} is already in use on "
            "127.0.0.1; stop what listens there, or run without --keep-port so that each "
            "server gets a free port\n"
        )
        assert nothing_written(tmp_path)
    finally:
        busy.close()


def test_keep_port_starts_a_serve_script_that_ignores_PORT_on_the_manifests_port(tmp_path) -> None:
    """A user's serve.py that listens on its own fixed port: found only with keep_port."""
    from sweeper.manifest import Manifest
    from sweeper.measure import EvalData, EvalSettings, evaluate
    from sweeper.serving import free_port

    port = free_port()
    (tmp_path / "serve.py").write_text(SERVE_PY.replace("PORT_NUMBER", str(port)))
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "name": "fixed-port",
                "served_model_name": "probe",
                "port": port,
                "serve": ["python", "serve.py"],
                "env": {},
            }
        )
    )
    manifest = Manifest.load(tmp_path / "manifest.json")
    nothing = EvalData(prompts=None, ppl_records=None, reference=None)
    settings = EvalSettings(
        tps=None,
        ppl=None,
        warmup=WarmupSettings(enabled=False),
        keep_port=True,
        ready_timeout_s=60,
        log_path=tmp_path / "server.log",
    )
    result = evaluate(manifest, settings, data=nothing)
    assert result.model == "probe" and result.timings["ready"] > 0
    assert f"listening on {port}" in (tmp_path / "server.log").read_text()

    # busy: a clear error naming the port, no server started
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the stopped server's TIME_WAIT
    busy.bind(("127.0.0.1", port))
    busy.listen(1)
    try:
        with pytest.raises(ServerError, match=f"port {port} is already in use by another process"):
            evaluate(manifest, settings, data=nothing)
    finally:
        busy.close()


SERVE_PY = """
import http.server, json

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "probe", "max_model_len": 64}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", PORT_NUMBER), Handler)  # ignores $PORT
print("listening on PORT_NUMBER", flush=True)
server.serve_forever()
"""


def test_server_python_runs_a_python_serve_command_with_that_interpreter(user_setup, tmp_path) -> None:
    from sweeper.manifest import Manifest

    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)  # a venv's python is a link too: it must not be resolved away
    script = Manifest.from_dict({"name": "m", "serve": ["python", "serve.py"]}, source=tmp_path / "m.json")
    assert script.resolve_serve_command() == [sys.executable, "serve.py"]
    assert script.with_server_python(python).resolve_serve_command() == [str(python), "serve.py"]
    assert script.with_server_python(python).to_dict() == script.to_dict()  # never saved with it
    prepared = prepare(
        RunPlan(
            manifest=str(user_setup.manifest),
            storage=f"sqlite:///{tmp_path / 'db'}",
            **_data(user_setup, heldout=True),
            server_python=str(python),
        )
    )
    assert prepared.manifest.server_python == str(python)
    assert prepared.recipe.server_python == str(python)


def test_server_venv_is_made_from_the_manifests_dependencies_and_recorded(
    monkeypatch, tmp_path, make_user, build_wheel
) -> None:
    wheel = build_wheel(tmp_path / "mine" / "wheels")
    user = make_user("mine")
    data = json.loads(user.manifest.read_text())
    data["dependencies"] = [f"./wheels/{wheel.name}"]
    data["serve"] = ["python", "-m", "sweeper", "serve", "my-manifest.json"]  # a python serve command
    user.manifest.write_text(json.dumps(data))
    monkeypatch.setenv("SWEEPER_VENV_CACHE", str(tmp_path / "venvs"))
    from sweeper.serving import dependencies_key

    key = dependencies_key(data["dependencies"])
    prepared = prepare(
        RunPlan(
            manifest=str(user.manifest),
            storage=f"sqlite:///{tmp_path / 'db'}",
            **_data(user, heldout=True),
            server_venv=True,
        )
    )
    python = str(tmp_path / "venvs" / key / "bin" / "python")
    assert prepared.manifest.server_python == prepared.recipe.server_python == python
    assert prepared.evaluator.base_manifest.resolve_serve_command()[:2] == [python, "-m"]
    assert sorted(p.name for p in (tmp_path / "venvs").iterdir()) == [key]


def _data(user_setup, *, heldout: bool = False) -> dict[str, str]:
    data = {"prompts": str(user_setup.prompts), "ppl_data": str(user_setup.ppl_data)}
    if heldout:
        data |= {
            "heldout_prompts": str(user_setup.heldout_prompts),
            "heldout_ppl_data": str(user_setup.heldout_ppl_data),
        }
    return data


def _synthetic_study(synthetic, url: str, name: str, recipe):
    """A finished synthetic study (real Optuna, real SQLite) that holds ``recipe``."""
    from search_spaces import load_preset
    from sweeper.manifest import Manifest

    space = load_preset("tiny-cpu").bind(Manifest.load(recipe.base_manifest).env)
    run_study(
        space,
        synthetic.synthetic_evaluator(),
        StudyOptions(
            study_name=name,
            storage=url,
            n_trials=len(synthetic.CONFIGS) + 1,
            gate=PplGate(cap=synthetic.CAP),
            sampler="random",
            seed=0,
            enqueue=list(synthetic.CONFIGS.values()),
            handle_signals=False,
        ),
    )
    save_recipe(url, name, recipe)
    return synthetic.SyntheticStudy(url=url, name=name, db=Path(url.removeprefix("sqlite:///")))


def _busy_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock
