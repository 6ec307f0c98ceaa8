"""``sweeper ablate`` on real vLLM (the tiny demo model): an output-changing setting is caught.

Three fresh servers (one round, one block): the demo manifest as it is (sliding window 32, the
window the model was trained with), the same with ``SLIDING_WINDOW=8`` (attention sees 8 tokens
back: other greedy tokens and a PPL about 2.3 times as high, docs/tiny-model.md) and with
``ENABLE_PREFIX_CACHING=1`` against unset (a cache: the same tokens, the same PPL). Each server's
PPL rows and fidelity are stored; the paired PPL ratio is recomputed here from those rows. The
same ablation run again adds no server (every slot is stored) and reads the same verdicts, and
``sweeper ablate --json`` and ``-o`` print and export them.

The closing race on real servers: the window of 8, raced as if it were exported, against the
manifest in 2 pairs of fresh servers (4 servers): its first server's tokens differ from the
original's, the original's second server reproduces them (the control), and the pairs' TPS are
the stored servers'.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from click.testing import CliRunner

from evaluators import PplSettings, TpsSettings
from storage import ABLATION_FINISHED, AblationStore
from sweeper.ablation import (
    AblationMode,
    AblationPlan,
    ClosingVerdict,
    OutputCheck,
    PplCheck,
    SwitchVerdict,
    close_ablation,
    find_switches,
    run_ablation,
)
from sweeper.cli import app
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings

pytestmark = pytest.mark.server

TPS = TpsSettings(num_prompts=4, output_len=32, warmup_requests=1)


def _log_ratio(arm_rows, base_rows) -> float:
    base = {row["id"]: row for row in base_rows}
    tokens = sum(row["tokens"] for row in arm_rows)
    return sum(row["nll"] - base[row["id"]]["nll"] for row in arm_rows) / tokens


def test_ablation_flags_the_setting_that_changes_the_outputs(demo, demo_manifest: Manifest, tmp_path) -> None:
    switches = find_switches(demo_manifest.env, flags=["ENABLE_PREFIX_CACHING"], alternatives={"SLIDING_WINDOW": "8"})
    plan = AblationPlan(
        name="demo-ablation",
        mode=AblationMode.LEAVE_ONE_OUT,
        switches=switches,
        rounds=1,
        block_size=2,
        fidelity_prompts=3,
        closing_pairs=0,  # the closing race on real vLLM has a test of its own
    )
    settings = EvalSettings(  # the demo's data as 'sweeper ablate' measures it: a default, not recorded
        default_prompts=demo.prompts_tuning,
        default_ppl_data=demo.ppl_tuning,
        tps=TPS,
        ppl=PplSettings(max_records=8),
        ready_timeout_s=600.0,
    )
    url = f"sqlite:///{tmp_path / 'ablation.db'}"
    lines: list[str] = []
    result = run_ablation(demo_manifest, plan, settings, url=url, workdir=tmp_path / "runs", progress=lines.append)

    assert result.servers == 3 and result.failed_servers == 0
    reports = {report.switch.key: report for report in result.reports}
    window, cache = reports["SLIDING_WINDOW"], reports["ENABLE_PREFIX_CACHING"]
    assert window.outputs is OutputCheck.CHANGED and window.fidelity.identical < window.fidelity.compared == 3
    assert window.ppl is PplCheck.HIGHER and window.ppl_ratio.low > 1.5
    assert cache.outputs is OutputCheck.SAME and cache.fidelity.identical == 3
    assert cache.ppl is PplCheck.SAME

    with AblationStore(url) as store:
        record = store.find("demo-ablation")
    assert record.status == ABLATION_FINISHED
    base, arm_cache, arm_window = sorted(record.servers, key=lambda s: -1 if s.arm is None else s.arm)
    assert dict(arm_window.overrides) == {"SLIDING_WINDOW": "8"} and dict(base.overrides) == {}
    # the window of 8 is the subject and the arm holds it: the ratio is arm over base, from the rows
    assert len(base.ppl_scores) == 8
    expected = _log_ratio(arm_window.ppl_scores, base.ppl_scores)
    assert math.log(window.ppl_ratio.value) == pytest.approx(expected, rel=1e-9)
    assert abs(_log_ratio(arm_cache.ppl_scores, base.ppl_scores)) < 1e-3
    assert [record.servers[i].tps > 0 for i in range(3)] == [True] * 3
    # TPS: one pair a switch on the prior spread, at 1 - 0.05 / 2
    assert result.effects.level == pytest.approx(0.975) and all(r.pairs == 1 for r in result.reports)
    assert window.verdict in (SwitchVerdict.HELPS_CHANGES_OUTPUT, SwitchVerdict.NO_EFFECT, SwitchVerdict.HURTS)

    # the same ablation again: every slot is stored, so no server starts, and the verdicts agree
    again = run_ablation(demo_manifest, plan, settings, url=url, workdir=tmp_path / "runs", progress=lines.append)
    assert [r.verdict for r in again.reports] == [r.verdict for r in result.reports]
    assert any("3 of 3 servers stored" in line for line in lines)
    assert any("SLIDING_WINDOW=8 (switch SLIDING_WINDOW=8)" in line for line in lines)

    out = tmp_path / "answer" / "manifest.json"
    runner = CliRunner()
    # the command line grouped as typed, an option beside its value (hence fmt: skip)
    cli = runner.invoke(
        app,
        [
            "ablate", str(demo.manifest), "--flags", "ENABLE_PREFIX_CACHING", "--alternative", "SLIDING_WINDOW=8",
            "--rounds", "1", "--block-size", "2", "--fidelity-prompts", "3", "--ppl-records", "8",
            "--num-prompts", "4", "--output-len", "32", "--name", "demo-ablation", "--storage", url,
            "--run-dir", str(tmp_path / "runs"), "-o", str(out), "--closing-pairs", "0", "--json",
        ],
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    data = json.loads(cli.stdout)
    assert [s["verdict"] for s in data["switches"]] == [r.verdict.value for r in result.reports]
    exported = Manifest.load(out)
    # the window of 8 changes the outputs: never exported; prefix caching is set only if it helps
    assert exported.env["SLIDING_WINDOW"] == "32"
    assert ("ENABLE_PREFIX_CACHING" in exported.env) == (cache.verdict is SwitchVerdict.HELPS)
    shown = runner.invoke(app, ["status", "--ablation", "demo-ablation", "--storage", url])
    assert shown.exit_code == 0, shown.output
    assert "finished, 3 of 3 servers" in shown.stdout
    assert "SLIDING_WINDOW=8 vs 32:" in shown.stdout and "3 identical: changed tokens" in shown.stdout

    # the closing race on real servers, of a change that is known to move the tokens
    closing_plan = dataclasses.replace(plan, closing_pairs=2)
    race = close_ablation(
        demo_manifest, closing_plan, {"SLIDING_WINDOW": "8"}, settings, url=url, workdir=tmp_path / "runs"
    )
    assert race.outputs is OutputCheck.CHANGED and race.fidelity.identical < race.fidelity.compared == 3
    assert race.control.identical == race.control.compared == 3
    assert race.verdict is not ClosingVerdict.CONFIRMED and len(race.pairs) == 2
    with AblationStore(url) as store:
        closing = store.find("demo-ablation").closing
    assert [(c.pair, c.side) for c in closing] == [(1, "original"), (1, "exported"), (2, "exported"), (2, "original")]
    tps = {(c.pair, c.side): c.tps for c in closing}
    assert [p.ratio for p in race.pairs] == pytest.approx(
        [tps[(1, "exported")] / tps[(1, "original")], tps[(2, "exported")] / tps[(2, "original")]], rel=1e-12
    )
