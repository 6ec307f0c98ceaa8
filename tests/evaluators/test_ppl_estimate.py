"""PPL arithmetic, the running estimate, and the scorer's fault handling.

Faults that real vLLM does not produce on demand (a missing logprob, -inf,
NaN) come from a scripted HTTP server speaking the same protocol.
"""

from __future__ import annotations

import math
import random

import pytest

from evaluators import (
    PplRecord,
    PplSettings,
    RecordScore,
    RunningPpl,
    measure_ppl,
    ppl_from_nll,
    ppl_gate,
)
from sweeper.errors import MeasurementError


def test_ppl_is_token_weighted_not_a_mean_of_record_ppls():
    running = RunningPpl(population=2)
    running.add(RecordScore(id="a", nll=10.0, tokens=10))  # record PPL e^1
    running.add(RecordScore(id="b", nll=90.0, tokens=30))  # record PPL e^3
    assert running.ppl == pytest.approx(math.exp(100.0 / 40.0))
    assert running.ppl != pytest.approx((math.e + math.e**3) / 2)
    assert running.stderr == 0.0  # every record of the population is in
    assert running.interval(0.99) == pytest.approx((running.ppl, running.ppl))


def test_ppl_from_nll_never_overflows():
    assert ppl_from_nll(9999.0 * 3, 3) == math.inf  # vLLM reports -inf as -9999.0
    assert ppl_from_nll(math.inf, 3) == math.inf
    assert ppl_from_nll(math.nan, 3) == math.inf
    assert not ppl_gate(math.inf, 2.42)
    assert ppl_gate(2.41, 2.42) and not ppl_gate(2.43, 2.42)


def synthetic_population(mean_nll: float, count: int = 128, seed: int = 3) -> list[RecordScore]:
    rng = random.Random(seed)
    scores = []
    for index in range(count):
        tokens = rng.randint(100, 512)
        per_token = rng.gauss(mean_nll, 0.08)
        scores.append(RecordScore(id=str(index), nll=per_token * tokens, tokens=tokens))
    return scores


def test_running_estimate_covers_the_final_ppl_and_stops_only_when_clearly_over():
    scores = synthetic_population(math.log(2.30))
    final = ppl_from_nll(sum(s.nll for s in scores), sum(s.tokens for s in scores))
    running = RunningPpl(population=len(scores))
    for index, score in enumerate(scores, start=1):
        running.add(score)
        low, high = running.interval(0.999)
        if index >= 16:
            assert low <= final <= high, f"interval after {index} records misses the final PPL"
            # a model at 2.30 is never "clearly over" a 2.42 cap ...
            assert not running.clearly_over(2.42, confidence=0.99)
    assert running.ppl == pytest.approx(final)

    # ... but one at 2.60 is, long before all 128 records are scored
    bad = RunningPpl(population=128)
    stopped_at = None
    for index, score in enumerate(synthetic_population(math.log(2.60)), start=1):
        bad.add(score)
        if bad.clearly_over(2.42, confidence=0.99):
            stopped_at = index
            break
    assert stopped_at is not None and stopped_at <= 20
    assert bad.lower_bound(0.99) > 2.42


def test_running_estimate_needs_min_records_and_infinite_nll_decides_at_once():
    running = RunningPpl(population=100)
    running.add(RecordScore(id="a", nll=500.0, tokens=100))  # PPL e^5, far over
    assert not running.clearly_over(2.42, min_records=16)
    assert running.stderr == math.inf
    running.add(RecordScore(id="b", nll=math.inf, tokens=100))
    assert running.clearly_over(2.42)
    assert running.ppl == math.inf


# -- through HTTP ------------------------------------------------------------


def logprob_entry(token: int, logprob: float) -> dict:
    return {str(token): {"logprob": logprob, "rank": 1, "decoded_token": "x"}}


def scripted_completions(logprob_of) -> callable:
    """A /v1/completions route whose prompt logprob at position p is logprob_of(record, p)."""

    def route(body):
        prompt = body["prompt"]
        assert body["prompt_logprobs"] == 1 and body["max_tokens"] == 1
        assert body["temperature"] == 0 and body["add_special_tokens"] is False
        entries = [None] + [
            (lambda v: None if v is None else logprob_entry(prompt[p], v))(logprob_of(prompt, p))
            for p in range(1, len(prompt))
        ]
        return 200, {"choices": [{"text": "", "prompt_logprobs": entries}]}

    return route


RECORDS = [
    PplRecord(id="r1", token_ids=(2, 7, 8, 9), score_start=2, score_end=4),
    PplRecord(id="r2", token_ids=(2, 7, 8, 9, 10), score_start=1, score_end=4),
]


def test_measure_ppl_reads_the_scored_span_only(scripted_server):
    scripted_server.routes["/v1/completions"] = scripted_completions(lambda prompt, p: -0.1 * p)
    result = measure_ppl(scripted_server.base_url, "m", RECORDS, PplSettings(order_seed=None))
    # r1 scores positions 2, 3; r2 scores 1, 2, 3 (not 4)
    expected_nll = (0.2 + 0.3) + (0.1 + 0.2 + 0.3)
    assert result.nll == pytest.approx(expected_nll)
    assert result.tokens == 5
    assert result.ppl == pytest.approx(math.exp(expected_nll / 5))
    assert result.complete and result.finite and result.passes(10.0)
    assert [s.id for s in result.scores] == ["r1", "r2"]
    assert result.to_dict()["records"][0] == {"id": "r1", "nll": pytest.approx(0.5), "tokens": 2}


def test_missing_logprob_is_an_error_naming_record_and_position(scripted_server):
    scripted_server.routes["/v1/completions"] = scripted_completions(
        lambda prompt, p: None if (len(prompt) == 5 and p == 3) else -0.5
    )
    with pytest.raises(MeasurementError, match=r"PPL record 'r2': no logprob for token 9 at position 3"):
        measure_ppl(scripted_server.base_url, "m", RECORDS, PplSettings(order_seed=None))


@pytest.mark.parametrize("bad", [-math.inf, math.nan])
def test_non_finite_logprob_makes_ppl_infinite_not_a_crash(scripted_server, bad):
    scripted_server.routes["/v1/completions"] = scripted_completions(
        lambda prompt, p: bad if (len(prompt) == 4 and p == 2) else -0.5
    )
    result = measure_ppl(scripted_server.base_url, "m", RECORDS, PplSettings(order_seed=None))
    assert result.ppl == math.inf and not result.finite
    assert result.nonfinite_records == ("r1",)
    assert not result.passes(2.42)
    data = result.to_dict()
    assert data["ppl"] is None and data["ppl_finite"] is False  # valid JSON, no Infinity


def test_measure_ppl_stops_early_when_clearly_over_the_cap(scripted_server):
    scripted_server.routes["/v1/completions"] = scripted_completions(lambda prompt, p: -1.5)
    records = [
        PplRecord(id=f"r{i}", token_ids=tuple(range(2, 40 + i)), score_start=5, score_end=38 + i) for i in range(64)
    ]
    settings = PplSettings(stop_above=2.42, min_records=8)
    result = measure_ppl(scripted_server.base_url, "m", records, settings)
    assert result.stopped_early and not result.complete
    assert result.records_scored == 8
    assert result.ppl == pytest.approx(math.exp(1.5))
    assert not result.passes(2.42)


def test_server_error_is_a_measurement_error_with_the_servers_message(scripted_server):
    scripted_server.routes["/v1/completions"] = lambda body: (
        400,
        {"error": {"message": "This model's maximum context length is 1024 tokens"}},
    )
    with pytest.raises(MeasurementError, match=r"PPL record 'r1': .* answered 400: This model's"):
        measure_ppl(scripted_server.base_url, "m", RECORDS, PplSettings(order_seed=None))


def test_settings_validate_themselves():
    with pytest.raises(ValueError, match="stop_confidence"):
        PplSettings(stop_confidence=1.5)
    with pytest.raises(ValueError, match="stop_above"):
        PplSettings(stop_above=0)


def test_a_ppl_record_timeout_scales_with_its_length(scripted_server):
    """A stand-in for a server that stops answering while scoring: each record's
    timeout is a base plus seconds per prompt token, and a timed-out record is a
    MeasurementError of kind timeout, not a wait of the old flat 600 s."""
    settings = PplSettings(timeout_base_s=0.5, timeout_per_token_s=0.1, order_seed=None)
    assert settings.request_timeout_s(4) == pytest.approx(0.9)
    assert settings.request_timeout_s(2943) == pytest.approx(294.8)
    assert PplSettings().request_timeout_s(2943) == pytest.approx(30 + 0.02 * 2943)
    assert PplSettings(timeout_s=5).request_timeout_s(2943) == 5

    answer = scripted_completions(lambda prompt, p: -0.1 * p)

    def slow_second(body):
        if len(body["prompt"]) == 5:  # r2 (5 tokens: 1.0 s allowed)
            import time

            time.sleep(2.5)
        return answer(body)

    scripted_server.routes["/v1/completions"] = slow_second
    with pytest.raises(MeasurementError, match="PPL record 'r2': timed out") as caught:
        measure_ppl(scripted_server.base_url, "m", RECORDS, settings)
    assert caught.value.kind == "timeout"
