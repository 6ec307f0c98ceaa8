"""The closing race: the exported manifest against the original, stored server by server.

The figures come from stored servers and are checked against a paired t-interval computed
here with scipy. The race's order, its fidelity reference and its resumption are checked
through ``run_ablation``'s ``measure`` seam: a scripted stand-in for the servers, because a
Ctrl-C in the middle of a race is a fault no real server produces on demand (the race on real
vLLM is in test_ablate_vllm.py).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from click.testing import CliRunner
from scipy import stats

from evaluators import FidelityResult, TpsResult, TpsSettings
from storage import ABLATION_FINISHED, ABLATION_INTERRUPTED, AblationStore, ClosingServer, stored_ablation
from sweeper.ablation import (
    AblationMode,
    AblationPlan,
    ClosingVerdict,
    OutputCheck,
    Speed,
    SwitchVerdict,
    analyse,
    closing_race,
    find_switches,
    judge_closing,
    pair_order,
    plan_from_record,
    run_ablation,
)
from sweeper.cli import app
from sweeper.errors import ServerStartError, UserInputError
from sweeper.measure import EvalResult, EvalSettings

TPS = TpsSettings(num_prompts=2, output_len=8)
SETTINGS = EvalSettings(tps=TPS, ppl=None)


def _server(pair: int, side: str, tps: float | None, **fields) -> ClosingServer:
    state = "complete" if tps else "failed"
    return ClosingServer(changes={"FOO": "1"}, pair=pair, side=side, state=state, tps=tps, seconds=10.0, **fields)


def test_the_race_reads_a_paired_t_interval_of_its_own_pairs() -> None:
    figures = {1: (150.0, 100.0), 2: (160.0, 104.0), 3: (140.0, 99.0)}
    servers = [
        _server(p, side, tps) for p, (e, o) in figures.items() for side, tps in (("exported", e), ("original", o))
    ]
    race = closing_race(servers, {"FOO": "1"})
    logs = [math.log(e / o) for e, o in figures.values()]
    mean, sd = sum(logs) / 3, math.sqrt(sum((x - sum(logs) / 3) ** 2 for x in logs) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert race.ratio == pytest.approx(math.exp(mean), rel=1e-12)
    assert race.speedup.low == pytest.approx(math.exp(mean - half), rel=1e-9)
    assert race.speedup.high == pytest.approx(math.exp(mean + half), rel=1e-9)
    assert race.verdict is ClosingVerdict.CONFIRMED and race.outputs is OutputCheck.NOT_MEASURED
    assert race.servers == 6 and race.failed_servers == 0 and race.seconds == 60.0
    assert "confirmed faster" in race.describe() and "FOO=1" in race.describe() and "2 df" in race.describe()
    assert race.describe().endswith("; 6 servers, 1.0 min")


def test_a_pair_with_a_failed_server_is_left_out_and_one_pair_is_unmeasured() -> None:
    servers = [_server(1, "original", 100.0), _server(1, "exported", 150.0), _server(2, "exported", None)]
    servers.append(_server(2, "original", 101.0))
    race = closing_race(servers, {"FOO": "1"})
    assert [p.pair for p in race.pairs] == [1] and race.speedup is None
    assert race.verdict is ClosingVerdict.UNMEASURED and race.failed_servers == 1
    assert "4 servers, 1 failed, 0.7 min" in race.describe()


def test_changed_tokens_in_the_exported_manifest_are_named() -> None:
    changed = {"compared": 3, "identical": 1, "divergences": [], "duration_s": 0.1}
    same = {"compared": 3, "identical": 3, "divergences": [], "duration_s": 0.1}
    servers = [
        _server(1, "original", 100.0),
        _server(1, "exported", 190.0, fidelity=changed),
        _server(2, "exported", 200.0),
        _server(2, "original", 98.0, fidelity=same),
    ]
    race = closing_race(servers, {"FOO": "1"})
    assert race.outputs is OutputCheck.CHANGED and race.verdict is ClosingVerdict.FASTER_CHANGES_OUTPUT
    assert race.fidelity == FidelityResult.from_dict(changed) and race.control.identical == 3


@pytest.mark.parametrize(
    ("speed", "outputs", "verdict"),
    [
        (Speed.FASTER, OutputCheck.SAME, ClosingVerdict.CONFIRMED),
        (Speed.FASTER, OutputCheck.NOT_DETERMINISTIC, ClosingVerdict.CONFIRMED),
        (Speed.FASTER, OutputCheck.CHANGED, ClosingVerdict.FASTER_CHANGES_OUTPUT),
        (Speed.NO_EFFECT, OutputCheck.CHANGED, ClosingVerdict.NOT_SHOWN),
        (Speed.SLOWER, OutputCheck.SAME, ClosingVerdict.SLOWER),
        (Speed.UNMEASURED, OutputCheck.SAME, ClosingVerdict.UNMEASURED),
    ],
)
def test_judge_closing(speed: Speed, outputs: OutputCheck, verdict: ClosingVerdict) -> None:
    assert judge_closing(speed, outputs) is verdict


def test_pairs_alternate_and_the_original_opens() -> None:
    assert [pair_order(p) for p in (1, 2, 3)] == [
        ("original", "exported"),
        ("exported", "original"),
        ("original", "exported"),
    ]


class Scripted:
    """Stands in for fresh servers: TPS 200 with FOO=1 and 100 without (``fast`` picks which side is
    faster), a small jitter by call; with ``changes_tokens`` FOO=1 changes one of two greedy
    outputs; records each call's settings; raises Ctrl-C at call ``stop`` and a failed start
    (the server's exit, which no healthy server gives on demand) at call ``fail``."""

    def __init__(
        self, *, fast: str = "1", stop: int | None = None, fail: int | None = None, changes_tokens: bool = False
    ) -> None:
        self.fast, self.stop, self.fail, self.calls, self.changes_tokens = fast, stop, fail, [], changes_tokens

    def __call__(self, manifest, settings: EvalSettings) -> EvalResult:
        self.calls.append(settings)
        if self.stop is not None and len(self.calls) == self.stop:
            raise KeyboardInterrupt
        if self.fail is not None and len(self.calls) == self.fail:
            raise ServerStartError("server exited with code 1 before it was ready", log_tail="CUDA error")
        if settings.save_reference is not None:
            settings.save_reference.write_text("{}")
        tps = (200.0 if settings.overrides.get("FOO", "unset") == self.fast else 100.0) * (1 + 0.01 * len(self.calls))
        identical = 1 if self.changes_tokens and settings.overrides.get("FOO") == "1" else 2
        fidelity = (
            FidelityResult(compared=2, identical=identical, divergences=(), duration_s=0.1)
            if settings.fidelity_reference is not None
            else None
        )
        return EvalResult(
            manifest=manifest.name,
            overrides=dict(settings.overrides),
            model="m",
            warmup=None,
            ppl=None,
            tps=TpsResult(settings=TPS, tps=tps, completed=2, total=2, output_tokens=16, duration_s=1.0, requests=()),
            fidelity=fidelity,
            timings={"ready_s": 1.0},
        )


def _plan(manifest, **fields) -> AblationPlan:
    switches = find_switches(manifest.env, flags=["FOO"])
    return AblationPlan(
        name="closing", mode=AblationMode.LEAVE_ONE_OUT, switches=switches, rounds=2, closing_pairs=2, **fields
    )


def test_a_helping_switch_is_raced_in_alternating_fresh_servers(demo_manifest, tmp_path) -> None:
    url, lines, measure = f"sqlite:///{tmp_path / 'a.db'}", [], Scripted()
    result = run_ablation(
        demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=measure, progress=lines.append
    )
    assert [r.verdict for r in result.reports] == [SwitchVerdict.HELPS] and result.changes == {"FOO": "1"}
    # 2 rounds of base + arm, then original, exported, exported, original
    closing_calls = measure.calls[4:]
    assert [dict(c.overrides) for c in closing_calls] == [{}, {"FOO": "1"}, {"FOO": "1"}, {}]
    assert all(c.ppl is None for c in closing_calls)
    reference = closing_calls[0].save_reference
    assert reference is not None and reference.name.endswith("closing-fidelity.json")
    assert [c.fidelity_reference for c in closing_calls] == [None, reference, None, reference]
    race = result.closing
    assert race.verdict is ClosingVerdict.CONFIRMED and race.outputs is OutputCheck.SAME
    expected = [(200.0 * 1.06) / (100.0 * 1.05), (200.0 * 1.07) / (100.0 * 1.08)]
    assert [p.ratio for p in race.pairs] == pytest.approx(expected, rel=1e-12)
    record = stored_ablation(url, "closing")
    assert record.status == ABLATION_FINISHED and len(record.closing) == 4
    assert [c.side for c in record.closing] == ["original", "exported", "exported", "original"]
    # the stored race reads the same through status's path
    again = analyse(record, plan_from_record(record))
    assert again.closing.to_dict() == race.to_dict()
    assert any("closing race: the exported manifest (FOO=1) against the original, 4 fresh servers" in x for x in lines)
    exported = json.loads(json.dumps(result.to_dict()))
    assert exported["changes"] == {"FOO": "1"} and exported["closing"]["verdict"] == "confirmed faster"


def test_an_interrupted_race_goes_on_from_the_next_server(demo_manifest, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(KeyboardInterrupt):
        run_ablation(demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=Scripted(stop=7))
    record = stored_ablation(url, "closing")
    assert record.status == ABLATION_INTERRUPTED and len(record.servers) == 4
    assert [(c.pair, c.side) for c in record.closing] == [(1, "original"), (1, "exported")]
    measure, lines = Scripted(), []
    result = run_ablation(
        demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=measure, progress=lines.append
    )
    assert [dict(c.overrides) for c in measure.calls] == [{"FOO": "1"}, {}]  # only pair 2
    assert len(result.closing.pairs) == 2 and stored_ablation(url, "closing").status == ABLATION_FINISHED
    assert any("4 fresh servers, 2 stored" in line for line in lines)


def test_a_failed_closing_server_is_named_by_its_pair_and_side(demo_manifest, tmp_path, caplog) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with caplog.at_level("WARNING", logger="sweeper.ablation._run"):  # call 6: pair 1's exported server
        result = run_ablation(
            demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=Scripted(fail=6)
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "ablation server (closing pair 1, exported) failed: server exited with code 1 before it was ready"
    ]
    stored = stored_ablation(url, "closing").closing
    assert [(c.pair, c.side, c.state) for c in stored] == [
        (1, "original", "complete"),
        (1, "exported", "failed"),
        (2, "exported", "complete"),
        (2, "original", "complete"),
    ]
    assert [p.pair for p in result.closing.pairs] == [2] and result.closing.failed_servers == 1
    assert result.closing.verdict is ClosingVerdict.UNMEASURED


def test_a_failed_round_server_is_named_by_its_round_and_setting(demo_manifest, tmp_path, caplog) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with caplog.at_level("WARNING", logger="sweeper.ablation._run"):
        run_ablation(demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=Scripted(fail=1))
    (first,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert first.startswith("ablation server (round 1, ") and first.endswith(
        "failed: server exited with code 1 before it was ready"
    )


def test_verdicts_that_keep_the_manifest_start_no_race(demo_manifest, tmp_path) -> None:
    url, lines, measure = f"sqlite:///{tmp_path / 'a.db'}", [], Scripted(fast="unset")
    result = run_ablation(
        demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=measure, progress=lines.append
    )
    assert [r.verdict for r in result.reports] == [SwitchVerdict.HURTS] and result.changes == {}
    assert len(measure.calls) == 4 and result.closing is None
    assert "the verdicts keep the manifest as it is: no closing race" in lines


def test_a_race_of_another_export_is_not_read_as_this_one(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with AblationStore(url) as store:
        record = store.start(name="x", mode="leave-one-out", manifest={}, switches=[], settings={})
        store.add_closing(record.id, _server(1, "original", 100.0))
        store.add_closing(record.id, dataclasses.replace(_server(1, "original", 100.0), changes={"BAR": "1"}))
        with pytest.raises(Exception, match="stored already"):
            store.add_closing(record.id, _server(1, "original", 90.0))
        stored = store.record(record.id)
    assert len(stored.closing) == 2
    assert [c.changes for c in stored.closing_for({"BAR": "1"})] == [{"BAR": "1"}]


def test_one_closing_pair_is_refused_before_any_server(demo, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    result = CliRunner().invoke(app, ["ablate", str(demo.manifest), "--closing-pairs", "1", "--storage", url])
    error = result.exception
    assert isinstance(error, UserInputError) and error.exit_code == 2
    assert "--closing-pairs must be 0 (no closing race) or at least 2" in str(error)
    assert not (tmp_path / "a.db").exists()


def test_an_output_change_raced_with_allow_output_change_is_read_back_so(demo_manifest, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    plan = _plan(demo_manifest, allow_output_change=True)
    result = run_ablation(
        demo_manifest, plan, SETTINGS, url=url, workdir=tmp_path, measure=Scripted(changes_tokens=True)
    )
    assert [r.verdict for r in result.reports] == [SwitchVerdict.HELPS_CHANGES_OUTPUT]
    assert result.changes == {"FOO": "1"}
    assert result.closing.verdict is ClosingVerdict.FASTER_CHANGES_OUTPUT
    record = stored_ablation(url, "closing")
    assert plan_from_record(record).allow_output_change is True
    assert analyse(record, plan_from_record(record)).closing.to_dict() == result.closing.to_dict()
    # the same ablation read without the flag: nothing to export, so no race to show; the servers stay
    measure = Scripted(changes_tokens=True)
    again = run_ablation(demo_manifest, _plan(demo_manifest), SETTINGS, url=url, workdir=tmp_path, measure=measure)
    assert measure.calls == [] and again.changes == {} and again.closing is None
    assert plan_from_record(stored_ablation(url, "closing")).allow_output_change is False
