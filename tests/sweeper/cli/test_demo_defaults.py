"""Every command that takes the bundled demo's files by default still takes them, now that the
commands hand them down (the study, measuring and answer packages know no demo).

Each command is run as a user runs it, with no data option, and stopped where it hands its
settings on (no server starts); what it handed on is compared with ``demo_paths()``.
"""

from __future__ import annotations

import json
import types

from click.testing import CliRunner

from sweeper.answer import heldout_data
from sweeper.cli import _study_view, ablate_cmd, app, eval_cmd, rerun_cmd, run_cmd, verify_cmd
from sweeper.demo import demo_paths
from sweeper.devices import NoDevices
from sweeper.manifest import Manifest
from sweeper.measure import load_eval_data
from sweeper.study import DataDefaults, StudyRecipe
from sweeper.sweep import DEMO_PRESET, demo_data, demo_models, prepare


class Stopped(Exception):
    """Raised where a command hands its settings on."""


def stop_at(monkeypatch, module, name: str) -> list[tuple[tuple, dict]]:
    """Replace ``module.name`` with a stop that records its arguments."""
    calls: list[tuple[tuple, dict]] = []

    def stop(*args, **kwargs):
        calls.append((args, kwargs))
        raise Stopped(name)

    monkeypatch.setattr(module, name, stop)
    return calls


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert isinstance(result.exception, Stopped), result.output
    return result


def test_the_demo_defaults_are_the_demo_files() -> None:
    demo = demo_paths()
    assert demo_data() == DataDefaults(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        heldout_prompts=demo.prompts_heldout,
        heldout_ppl_data=demo.ppl_heldout,
    )
    assert demo_models() == {demo.model: DEMO_PRESET}


def test_run_tunes_and_verifies_on_the_demo_sets(monkeypatch, tmp_path) -> None:
    planned = stop_at(monkeypatch, run_cmd, "prepare")
    monkeypatch.setattr(run_cmd, "open_devices", lambda: NoDevices("no GPU here"))
    monkeypatch.chdir(tmp_path)  # the demo's study file and run folder
    invoke("run", "--plain")
    ((plan,), _) = planned[0]
    prepared = prepare(plan)  # the real checks: manifest, space, tuning and held-out data
    demo = demo_paths()
    recipe = prepared.recipe
    assert (recipe.prompts, recipe.ppl_data) == (str(demo.prompts_tuning), str(demo.ppl_tuning))
    assert (recipe.heldout_prompts, recipe.heldout_ppl_data) == (str(demo.prompts_heldout), str(demo.ppl_heldout))
    data = prepared.evaluator.data
    assert (data.prompts.source, data.ppl_records.source) == (str(demo.prompts_tuning), str(demo.ppl_tuning))
    assert prepared.space.name == DEMO_PRESET


def test_eval_measures_the_demo_tuning_sets(monkeypatch) -> None:
    loaded = []
    real = eval_cmd.load_eval_data

    def load_then_stop(manifest, settings):
        loaded.append(real(manifest, settings))
        raise Stopped("load_eval_data")

    monkeypatch.setattr(eval_cmd, "load_eval_data", load_then_stop)
    demo = demo_paths()
    invoke("eval", str(demo.manifest), "--num-prompts", "2", "--output-len", "8")
    data = loaded[0]
    assert (data.prompts.source, data.ppl_records.source) == (str(demo.prompts_tuning), str(demo.ppl_tuning))


def test_ablate_measures_the_demo_tuning_sets_and_records_none(monkeypatch) -> None:
    calls = stop_at(monkeypatch, ablate_cmd, "run_ablation")
    demo = demo_paths()
    invoke("ablate", str(demo.manifest), "--flags", "ENABLE_PREFIX_CACHING")
    (_, plan, settings), _ = calls[0]
    assert (settings.default_prompts, settings.default_ppl_data) == (demo.prompts_tuning, demo.ppl_tuning)
    # what the ablation stores is what was given, as before: a resumed one still matches
    stored = plan.stored_settings(settings)
    assert stored["prompts"] is None and stored["ppl_data"] is None
    data = load_eval_data(Manifest.load(demo.manifest), settings)
    assert (data.prompts.source, data.ppl_records.source) == (str(demo.prompts_tuning), str(demo.ppl_tuning))


def test_rerun_measures_the_demo_tuning_prompts(monkeypatch) -> None:
    calls = stop_at(monkeypatch, rerun_cmd, "rerun_against_base")
    demo = demo_paths()
    invoke("rerun", str(demo.manifest), "--base", str(demo.manifest))
    (_, _, settings), _ = calls[0]
    assert settings.prompts == str(demo.prompts_tuning)


def test_verify_hands_down_the_demo_sets(monkeypatch, tmp_path) -> None:
    calls = stop_at(monkeypatch, verify_cmd, "verify_study")
    invoke("verify", "--storage", f"sqlite:///{tmp_path / 'unused.db'}")
    args, kwargs = calls[0]
    settings = args[0] if args else kwargs["settings"]
    assert settings.data_defaults == demo_data()
    # a study that records no data (run_study from Python) is verified on the demo's held-out sets
    demo = demo_paths()
    chosen = heldout_data(StudyRecipe(), defaults=settings.data_defaults)
    assert (chosen.prompts, chosen.ppl_data) == (str(demo.prompts_heldout), str(demo.ppl_heldout))


def test_import_picks_the_demo_preset_for_the_demo_model() -> None:
    result = CliRunner().invoke(app, ["import", str(demo_paths().manifest), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["space"] == DEMO_PRESET


def test_status_says_a_study_without_data_tuned_on_the_demo() -> None:
    status = types.SimpleNamespace(settings={"recipe": StudyRecipe().to_attr()})
    lines = _study_view.recipe_lines(status)
    assert "held-out data: prompts demo; PPL demo" in lines
    own = StudyRecipe(prompts="mine.json", ppl_data="mine.jsonl").to_attr()
    assert "held-out data: prompts none recorded; PPL none recorded" in _study_view.recipe_lines(
        types.SimpleNamespace(settings={"recipe": own})
    )
