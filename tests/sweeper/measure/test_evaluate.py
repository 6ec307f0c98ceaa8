"""measure/ without a server: the held-out split, the warm-up bridge's env, a trial's time limit,
and which trials' servers start warm (the servers a claim rests on never do)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evaluators import PplSettings, TpsSettings, WarmupSettings, load_prompts
from sweeper.demo import demo_paths
from sweeper.errors import DataError
from sweeper.manifest import Manifest
from sweeper.measure import DataSplit, EvalSettings, ServerEvaluator, load_eval_data, warmup_settings_from
from sweeper.measure._server_evaluator import trial_limit_s
from sweeper.serving import WarmStarts
from sweeper.study import confirmation_role


def test_a_split_gives_disjoint_parts_that_cover_the_set_and_repeat_with_its_seed() -> None:
    prompts = load_prompts(demo_paths().prompts_tuning)
    tuning = DataSplit(heldout_fraction=0.25, seed=3).of(prompts)
    heldout = DataSplit(heldout_fraction=0.25, seed=3, part="heldout").of(prompts)
    ids = lambda part: [p.id for p in part.prompts]  # noqa: E731 - a one-line helper
    assert not set(ids(tuning)) & set(ids(heldout))
    assert sorted(ids(tuning) + ids(heldout)) == sorted(ids(prompts))
    assert ids(DataSplit(heldout_fraction=0.25, seed=3).of(prompts)) == ids(tuning)
    assert 0 < len(heldout.prompts) < len(prompts.prompts)


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1, True, "0.25"])
def test_a_fraction_outside_0_1_is_refused_naming_the_option(fraction: object) -> None:
    with pytest.raises(DataError, match="--heldout-fraction must be a fraction between 0 and 1"):
        DataSplit(heldout_fraction=fraction)  # type: ignore[arg-type]


def _manifest(tmp_path: Path, env: dict[str, str]) -> Manifest:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"name": "m", "model_id": "m", "serve": ["python", "s.py"], "port": 8000, "env": env}))
    return Manifest.load(path)


def test_the_warm_up_bridge_reads_the_manifest_env_with_overrides_on_top(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"WARMUP_NUM_PROMPTS": "16", "WARMUP_MAX_TOKENS": "4"})
    assert warmup_settings_from(manifest) == WarmupSettings(num_prompts=16, max_tokens=4)
    assert warmup_settings_from(manifest, {"WARMUP_BRIDGE": "off"}).enabled is False
    assert warmup_settings_from(_manifest(tmp_path, {})) == WarmupSettings()
    with pytest.raises(DataError, match="WARMUP_"):
        warmup_settings_from(_manifest(tmp_path, {"WARMUP_SEED": "x"}))


def test_a_trials_time_limit_at_the_challenges_sizes() -> None:
    # 128 PPL records of 97,145 tokens in all, 64 bridge prompts of 1 token, 4 + 128 TPS requests
    # of 512 tokens, no reference; by hand: two starts of 900 s plus 90 s teardown, 2 s and
    # 1/2000 s a token per record, 2 s and 1/20 s a token per request
    lengths = [97_145 // 128] * 127 + [97_145 - 127 * (97_145 // 128)]
    data = SimpleNamespace(
        ppl_records=[SimpleNamespace(token_ids=[0] * n) for n in lengths], prompts=[None] * 128, reference=None
    )
    settings = EvalSettings(
        tps=TpsSettings(num_prompts=128, output_len=512, warmup_requests=4), ppl=PplSettings(), ready_timeout_s=900
    )
    expected = 2 * (900 + 90) + (128 * 2 + 97_145 / 2000) + 64 * (2 + 1 / 20) + 132 * (2 + 512 / 20)
    assert trial_limit_s(settings, data, WarmupSettings()) == pytest.approx(expected)  # type: ignore[arg-type]
    assert trial_limit_s(settings, data, WarmupSettings(enabled=False)) == pytest.approx(  # type: ignore[arg-type]
        expected - 64 * (2 + 1 / 20)
    )


@pytest.mark.parametrize(
    ("starts", "role", "attempt", "warm"),
    [
        (WarmStarts.SEARCH, "search", 1, True),
        (WarmStarts.SEARCH, "search", 2, False),  # a retried start is always fresh
        (WarmStarts.SEARCH, "baseline", 1, False),  # the base's own trial: a claim rests on it
        (WarmStarts.SEARCH, confirmation_role(3, 1), 1, False),  # a race server
        (WarmStarts.SEARCH, confirmation_role(3, 2, claim=True), 1, False),
        (WarmStarts.ALL, confirmation_role(3, 1), 1, True),
        (WarmStarts.ALL, "baseline", 2, False),
        (WarmStarts.OFF, "search", 1, False),
    ],
)
def test_which_trials_servers_start_warm(
    starts: WarmStarts, role: str, attempt: int, warm: bool, tmp_path: Path
) -> None:
    paths = demo_paths()
    manifest = Manifest.load(paths.manifest)
    settings = EvalSettings(prompts=paths.prompts_tuning, ppl_data=paths.ppl_tuning)
    evaluator = ServerEvaluator(
        manifest, settings, run_dir=tmp_path, data=load_eval_data(manifest, settings), warm_starts=starts
    )
    assert evaluator._warm(SimpleNamespace(role=role), attempt) is warm  # type: ignore[arg-type]
