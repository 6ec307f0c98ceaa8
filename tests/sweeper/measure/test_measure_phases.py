"""measure_server's phase decisions without a server: which phases run, which are skipped and why.

The evaluators it calls are replaced by stand-ins that record the call and return a fixed
result, so these pin the order and the skips (PPL gate, screen floor, reference) by hand.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from evaluators import PplSettings, TpsSettings
from sweeper.measure import EvalData, EvalSettings, _evaluate, measure_server

MODEL = "m"


class _Calls:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, ppl_stopped: bool = False, screen_tps: float = 5.0) -> None:
        self.phases: list[str] = []
        self.saved_to: list[str] = []

        def record(phase: str, result: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                self.phases.append(phase)
                return result

            return call

        tps_calls = {"n": 0}

        def tps(base_url: str, model: str, prompts: Any, settings: TpsSettings, **kwargs: Any) -> Any:
            tps_calls["n"] += 1
            self.phases.append("screen" if settings.num_prompts == 2 else "tps")
            return types.SimpleNamespace(tps=screen_tps if settings.num_prompts == 2 else 9.0)

        def reference(*args: Any, **kwargs: Any) -> Any:
            self.phases.append("reference")
            return types.SimpleNamespace(save=lambda path: self.saved_to.append(str(path)) or path)

        monkeypatch.setattr(_evaluate, "served_models", lambda base_url: {MODEL: 0})
        monkeypatch.setattr(
            _evaluate, "measure_ppl", record("ppl", types.SimpleNamespace(ppl=3.25, stopped_early=ppl_stopped))
        )
        monkeypatch.setattr(_evaluate, "run_warmup", record("warmup", "warm"))
        monkeypatch.setattr(_evaluate, "measure_tps", tps)
        monkeypatch.setattr(_evaluate, "measure_fidelity", record("fidelity", "fid"))
        monkeypatch.setattr(_evaluate, "generate_reference", reference)


def _data(*, reference: bool = False) -> EvalData:
    prompts = types.SimpleNamespace(head=lambda n: ["p"] * n)
    return EvalData(prompts=prompts, ppl_records=["r"], reference="ref" if reference else None)  # type: ignore[arg-type]  # stand-ins


def _settings(**changes: Any) -> EvalSettings:
    base = {
        "tps": TpsSettings(num_prompts=4, output_len=8),
        "ppl": PplSettings(stop_above=3.0),
    }
    return EvalSettings(**{**base, **changes})


def test_every_phase_in_order_when_nothing_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls(monkeypatch)
    settings = _settings(screen=TpsSettings(num_prompts=2, output_len=8), screen_floor=4.0)
    result = measure_server("http://x", MODEL, _data(reference=True), settings)
    assert calls.phases == ["ppl", "warmup", "screen", "tps", "fidelity"]
    assert result.skipped == ()
    assert result.tps is not None and result.tps.tps == 9.0
    assert result.screen is not None and result.screen.tps == 5.0
    assert set(result.timings) == {"ppl", "warmup", "screen", "tps", "fidelity"}


def test_a_trial_stopped_by_the_gate_skips_warmup_screen_and_tps(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls(monkeypatch, ppl_stopped=True)
    settings = _settings(screen=TpsSettings(num_prompts=2, output_len=8))
    result = measure_server("http://x", MODEL, _data(), settings)
    assert calls.phases == ["ppl"]
    assert result.tps is None and result.screen is None and result.warmup is None
    assert result.skipped == (
        "warmup: nothing timed follows a trial stopped by the PPL gate",
        "tps: PPL 3.2500 is clearly over the cap 3.0",
    )


def test_a_stopped_trial_still_warms_up_for_the_fidelity_it_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls(monkeypatch, ppl_stopped=True)
    result = measure_server("http://x", MODEL, _data(reference=True), _settings())
    assert calls.phases == ["ppl", "warmup", "fidelity"]
    assert result.skipped == ("tps: PPL 3.2500 is clearly over the cap 3.0",)


def test_tps_after_a_failed_gate_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls(monkeypatch, ppl_stopped=True)
    result = measure_server("http://x", MODEL, _data(), _settings(tps_after_failed_gate=True))
    assert calls.phases == ["ppl", "warmup", "tps"]
    assert result.skipped == ()


def test_a_screen_below_the_floor_spares_the_tps_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls(monkeypatch, screen_tps=3.5)
    settings = _settings(screen=TpsSettings(num_prompts=2, output_len=8), screen_floor=4.0)
    result = measure_server("http://x", MODEL, _data(), settings)
    assert calls.phases == ["ppl", "warmup", "screen"]
    assert result.tps is None and result.screen is not None
    assert result.skipped == (
        "tps: the screen read 3.50 tok/s, below the floor 4.00 (it cannot beat the study's best)",
    )


def test_a_reference_is_saved_last_where_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    calls = _Calls(monkeypatch)
    target = tmp_path / "ref.json"
    result = measure_server("http://x", MODEL, _data(), _settings(ppl=None, save_reference=target))
    assert calls.phases == ["warmup", "tps", "reference"]
    assert calls.saved_to == [str(target)] and result.reference_saved == str(target)
