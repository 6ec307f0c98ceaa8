"""sweeper rerun: the order of the pairs, and the paired interval, against an independent computation.

The real path (real vLLM servers for both manifests) is exercised end to end by
tests/sweeper/sweep/test_claim_reproduces_vllm.py; here a recording stand-in takes the
place of the server so that the alternation and the arithmetic are checked exactly.
"""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from evaluators import TpsSettings
from sweeper.answer import RerunSettings, RerunSettingsError, rerun_against_base
from sweeper.demo import demo_paths
from sweeper.errors import MeasurementError
from sweeper.manifest import Manifest


class _Tps:
    def __init__(self, tps):
        self.tps = tps


class _Result:
    def __init__(self, tps):
        self.tps = _Tps(tps)


def test_pairs_alternate_and_the_ratio_is_the_paired_geometric_mean() -> None:
    answer = Manifest.load(demo_paths().manifest)
    base = Manifest.load(demo_paths().gpu_manifest)  # any two manifests: told apart by identity
    figures = {id(answer): [131.0, 170.0, 149.0, 168.0], id(base): [160.0, 156.0, 161.0, 147.0]}
    calls = []

    def measure(manifest, settings):
        calls.append("answer" if manifest is answer else "base")
        assert settings.ppl is None and settings.tps.num_prompts == 8  # TPS only, at the given size
        return _Result(figures[id(manifest)].pop(0))

    settings = RerunSettings(pairs=4, tps=TpsSettings(num_prompts=8, output_len=128, warmup_requests=1))
    result = rerun_against_base(answer, base, settings, measure=measure)
    assert calls == ["answer", "base", "base", "answer", "answer", "base", "base", "answer"]
    pairs = [(131.0, 160.0), (170.0, 156.0), (149.0, 161.0), (168.0, 147.0)]
    assert [(p.answer_tps, p.base_tps) for p in result.pairs] == pairs
    logs = [math.log(a / b) for a, b in pairs]
    half = stats.t.ppf(0.975, 3) * statistics.stdev(logs) / 2.0
    assert result.ratio == pytest.approx(math.exp(statistics.fmean(logs)))
    assert result.speedup.low == pytest.approx(math.exp(statistics.fmean(logs) - half))
    assert result.speedup.high == pytest.approx(math.exp(statistics.fmean(logs) + half))
    assert "over 4 interleaved pair(s) in fresh servers" in result.describe()


def test_one_pair_has_no_interval_and_bad_settings_name_the_field() -> None:
    answer = Manifest.load(demo_paths().manifest)
    base = Manifest.load(demo_paths().gpu_manifest)
    result = rerun_against_base(
        answer, base, RerunSettings(pairs=1), measure=lambda m, _s: _Result(120.0 if m is answer else 100.0)
    )
    assert result.speedup is None and "(one pair: no interval" in result.describe()
    with pytest.raises(RerunSettingsError, match="pairs"):
        RerunSettings(pairs=0)


def test_a_run_that_did_not_complete_stops_the_rerun_with_its_pair_named() -> None:
    answer = Manifest.load(demo_paths().manifest)

    def measure(manifest, settings):
        return _Result(None)

    with pytest.raises(MeasurementError, match="pair 1: the answer manifest"):
        rerun_against_base(answer, answer, RerunSettings(pairs=2), measure=measure)
