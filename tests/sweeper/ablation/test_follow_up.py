"""A second stage (``sweeper ablate --follow-up``): the switches that read farthest from 1 are
re-measured in an ablation of their own and judged on its servers alone.

The first stage is measured through ``run_ablation``'s ``measure`` seam, scripted here (a
stand-in for the servers: what is tested is which switches are chosen from stored figures and
that the second stage measures those alone); the command's errors start no server.
"""

from __future__ import annotations

import io
import math

import pytest
from click.testing import CliRunner
from rich.console import Console

from evaluators import TpsResult, TpsSettings
from storage import stored_ablation
from storage._queries import StudyNotFoundError
from sweeper.ablation import AblationMode, AblationPlan, analyse, find_switches, follow_up_switches, run_ablation
from sweeper.cli import app
from sweeper.cli.ablate_cmd import _follow_up
from sweeper.errors import ServerStartError, UserInputError
from sweeper.measure import EvalResult, EvalSettings

TPS = TpsSettings(num_prompts=2, output_len=8)
SETTINGS = EvalSettings(tps=TPS, ppl=None)
# the TPS factor of each flag turned on; the manifest leaves them unset, so each arm turns one on
FACTORS = {"A": 1.02, "B": 1.5, "C": 0.8, "D": 0.99}


class Scripted:
    """Stands in for fresh servers: 100 tok/s times the factor of every flag set to 1 (``broken``:
    that flag's server fails to start); records each call's overrides."""

    def __init__(self, broken: str | None = None) -> None:
        self.broken, self.calls = broken, []

    def __call__(self, manifest, settings: EvalSettings) -> EvalResult:
        self.calls.append(dict(settings.overrides))
        if self.broken and settings.overrides.get(self.broken) == "1":
            raise ServerStartError("exited with code 1 during start-up", kind="crash")
        tps = 100.0 * math.prod(FACTORS[k] for k, v in settings.overrides.items() if v == "1")
        return EvalResult(
            manifest=manifest.name,
            overrides=dict(settings.overrides),
            model="m",
            warmup=None,
            ppl=None,
            tps=TpsResult(settings=TPS, tps=tps, completed=2, total=2, output_tokens=16, duration_s=1.0, requests=()),
            fidelity=None,
            timings={},
        )


def _first_stage(manifest, url, tmp_path, broken=None):
    plan = AblationPlan(
        name="first",
        mode=AblationMode.LEAVE_ONE_OUT,
        switches=find_switches(manifest.env, flags=list(FACTORS)),
        rounds=2,
        closing_pairs=0,
    )
    return run_ablation(manifest, plan, SETTINGS, url=url, workdir=tmp_path, measure=Scripted(broken))


def test_the_farthest_from_1_are_chosen_in_the_ablation_s_order(demo_manifest, tmp_path) -> None:
    first = _first_stage(demo_manifest, f"sqlite:///{tmp_path / 'a.db'}", tmp_path)
    effects = {r.switch.key: r.tps_effect.value for r in first.reports}
    assert effects == pytest.approx(FACTORS, rel=1e-9)  # no noise in the stand-in: each effect is its factor
    assert [s.key for s in follow_up_switches(first, 2)] == ["B", "C"]  # |log 1.5| > |log 0.8| > |log 1.02|
    assert [s.key for s in follow_up_switches(first, 3)] == ["A", "B", "C"]
    assert [s.key for s in follow_up_switches(first, 9)] == ["A", "B", "C", "D"]
    with pytest.raises(UserInputError, match="--keep"):
        follow_up_switches(first, 0)


def test_a_switch_that_never_started_is_not_followed_up(demo_manifest, tmp_path) -> None:
    first = _first_stage(demo_manifest, f"sqlite:///{tmp_path / 'a.db'}", tmp_path, broken="B")
    assert [s.key for s in follow_up_switches(first, 2)] == ["A", "C"]


def test_the_second_stage_measures_the_chosen_alone(demo_manifest, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    first = _first_stage(demo_manifest, url, tmp_path)
    console = Console(file=io.StringIO(), width=200)
    switches, mode = _follow_up("first", 2, demo_manifest, url, console)
    assert [s.key for s in switches] == ["B", "C"] and mode is AblationMode.LEAVE_ONE_OUT
    shown = console.file.getvalue()
    assert "the 2 switch(es) that read farthest from 1" in shown and "B=1: +50.0%" in shown
    measure = Scripted()
    second = run_ablation(
        demo_manifest,
        AblationPlan(name="first-follow-up", mode=mode, switches=switches, rounds=3, closing_pairs=0),
        SETTINGS,
        url=url,
        workdir=tmp_path,
        measure=measure,
    )
    # 3 rounds of one block: a base and the two chosen arms, nothing of A or D
    assert len(measure.calls) == 9 and all(set(c) <= {"B", "C"} for c in measure.calls)
    assert [r.switch.key for r in second.reports] == ["B", "C"] and second.effects.level == pytest.approx(0.975)
    # read back from storage, the second stage judges from its own servers alone
    plan = AblationPlan(name="first-follow-up", mode=mode, switches=switches, rounds=3, closing_pairs=0)
    assert analyse(stored_ablation(url, "first-follow-up"), plan).reports == second.reports
    assert len(first.reports) == 4  # the first stage is left as it was


def test_follow_up_errors_start_no_server(demo, demo_manifest, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    _first_stage(demo_manifest, url, tmp_path)
    runner = CliRunner()
    mixed = runner.invoke(app, ["ablate", str(demo.manifest), "--follow-up", "first", "--flags", "A", "--storage", url])
    assert isinstance(mixed.exception, UserInputError) and "--follow-up takes" in str(mixed.exception)
    unknown = runner.invoke(app, ["ablate", str(demo.manifest), "--follow-up", "nope", "--storage", url])
    assert isinstance(unknown.exception, StudyNotFoundError) and "stored: first" in str(unknown.exception)
    other = demo_manifest.render(name="another")
    with pytest.raises(UserInputError, match="measured manifest 'tiny-gemma4-demo', not 'another'"):
        _follow_up("first", 2, other, url, Console(file=io.StringIO()))
