"""TPS bookkeeping, spec-decode counters, warm-up and fidelity comparison, against a
scripted HTTP server (failures and multi-token chunks on demand)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from evaluators import (
    Prompt,
    TpsSettings,
    WarmupSettings,
    first_divergence,
    measure_tps,
    run_warmup,
    spec_decode_delta,
    synthetic_prompts,
)
from evaluators.spec_metrics import counters_from_metrics
from evaluators.tps import select_prompts
from sweeper.errors import MeasurementError

PROMPTS = [Prompt(id=f"p{i}", text=f"prompt number {i}") for i in range(4)]

METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %(drafts)s
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %(draft_tokens)s
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %(accepted)s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} %(p0)s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} %(p1)s
"""


def chat_route(tokens_for):
    def route(body):
        assert body["messages"][0]["role"] == "user"
        assert body["temperature"] == 0.0 and body["ignore_eos"] is True and body["stream"] is False
        tokens = tokens_for(body)
        if isinstance(tokens, tuple):  # (status, body)
            return tokens
        return 200, {
            "choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": tokens},
        }

    return route


def metrics_route(scrapes):
    def route(body):
        return 200, METRICS % scrapes.pop(0)

    return route


def test_tps_is_usage_tokens_over_wall_clock_and_brackets_the_metrics(scripted_server):
    def tokens(body):
        time.sleep(0.02)
        return body["max_tokens"]

    scripted_server.routes["/v1/chat/completions"] = chat_route(tokens)
    scripted_server.routes["/metrics"] = metrics_route(
        [
            {"drafts": 10, "draft_tokens": 20, "accepted": 5, "p0": 4, "p1": 1},
            {"drafts": 40, "draft_tokens": 80, "accepted": 50, "p0": 28, "p1": 22},
        ]
    )
    settings = TpsSettings(num_prompts=3, output_len=16, warmup_requests=2, order="given", warmup="sequential")
    result = measure_tps(scripted_server.base_url, "m", PROMPTS, settings)
    assert result.ok and (result.completed, result.total) == (3, 3)
    assert result.output_tokens == 48
    assert result.tps == pytest.approx(48 / result.duration_s)
    assert result.duration_s >= 3 * 0.02
    # the old protocol: 2 warm-up requests (first prompts, untimed), then the 3 measured ones
    sent = [body["messages"][0]["content"] for path, body in scripted_server.requests if path == "/v1/chat/completions"]
    assert sent == [
        "prompt number 0",
        "prompt number 1",
        "prompt number 0",
        "prompt number 1",
        "prompt number 2",
    ]
    spec = result.spec_decode
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (30, 60, 45)
    assert spec.accepted_per_position == (24, 21)
    assert spec.per_position_acceptance == pytest.approx((0.8, 0.7))
    assert spec.mean_acceptance_length == pytest.approx(2.5)
    assert spec.acceptance_rate == pytest.approx(0.75)


def test_failed_and_truncated_requests_fail_the_measurement(scripted_server):
    answers = iter([16, (500, {"error": {"message": "engine died"}}), 16, 9])
    scripted_server.routes["/v1/chat/completions"] = chat_route(lambda body: next(answers))
    result = measure_tps(
        scripted_server.base_url,
        "m",
        PROMPTS,
        TpsSettings(num_prompts=4, output_len=16, warmup_requests=0, order="given"),
        spec_metrics=False,
    )
    assert (result.completed, result.total) == (2, 4)
    assert result.tps is None and not result.ok
    assert [(f.index, f.prompt_id) for f in result.failures] == [(1, "p1"), (3, "p3")]
    assert result.failures[0].error == "HTTP 500: engine died"
    assert result.failures[1].error == "truncated: 9 of 16 tokens (finish_reason 'length')"
    assert result.output_tokens == 32  # completed requests only
    data = result.to_dict()
    assert data["tps"] is None and len(data["failures"]) == 2 and len(data["requests"]) == 4
    with pytest.raises(MeasurementError, match=r"2/4 completed; first: request 1 \(p1\): HTTP 500"):
        result.raise_for_failures()


def test_unreachable_server_marks_the_rest_not_sent(scripted_server):
    base_url = scripted_server.base_url
    scripted_server.httpd.shutdown()
    scripted_server.httpd.server_close()
    result = measure_tps(base_url, "m", PROMPTS, TpsSettings(num_prompts=3, warmup_requests=0), spec_metrics=False)
    assert (result.completed, result.total) == (0, 3)
    assert result.failures[0].error.startswith("server unreachable")
    assert result.failures[2].error.startswith("not sent: server unreachable")


def test_streaming_ttft_and_itl_count_every_token_of_multi_token_chunks(scripted_server):
    def stream(body):
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        events, count = [], 0
        for step in (1, 3, 4, 2):  # a speculative server emits several tokens per chunk
            count += step
            events.append(
                json.dumps(
                    {
                        "choices": [{"delta": {"content": "t" * step}, "finish_reason": None}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": count},
                    }
                )
            )
        events.append(json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 10}}))
        events.append("[DONE]")
        return 200, events

    scripted_server.routes["/v1/chat/completions"] = stream
    result = measure_tps(
        scripted_server.base_url,
        "m",
        PROMPTS,
        TpsSettings(num_prompts=1, output_len=10, warmup_requests=0, stream=True),
        spec_metrics=False,
    )
    record = result.requests[0]
    assert record.ok and record.output_tokens == 10 and record.max_tokens_per_chunk == 4
    assert record.ttft_s is not None and record.ttft_s <= record.latency_s
    # ITL spreads the time after the first token over the 9 tokens after it, not over 3 chunks
    assert record.itl_s is not None and record.itl_s * 9 <= record.latency_s - record.ttft_s + 1e-3


def test_metrics_without_spec_decoding_give_no_stats():
    assert counters_from_metrics("vllm:num_requests_running 0\n") is None
    assert spec_decode_delta(None, None) is None


def test_warmup_bridge_sends_seeded_one_token_prompts(scripted_server):
    scripted_server.routes["/v1/chat/completions"] = lambda body: (
        200,
        {"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": 1}},
    )
    settings = WarmupSettings(num_prompts=5, seed=42)
    result = run_warmup(scripted_server.base_url, "m", settings)
    assert result.requests == 5 and result.settings == settings
    bodies = [body for _, body in scripted_server.requests]
    assert [b["max_tokens"] for b in bodies] == [1] * 5
    assert [b["messages"][0]["content"] for b in bodies] == synthetic_prompts(settings)
    assert synthetic_prompts(settings) == synthetic_prompts(WarmupSettings(num_prompts=5, seed=42))
    assert synthetic_prompts(settings) != synthetic_prompts(WarmupSettings(num_prompts=5, seed=1))
    lengths = [len(p.split()) for p in synthetic_prompts(WarmupSettings())]
    assert len(lengths) == 64 and min(lengths) >= 8 and max(lengths) <= 192
    assert run_warmup(scripted_server.base_url, "m", WarmupSettings(enabled=False)).requests == 0


def test_warmup_failure_is_a_measurement_error(scripted_server):
    scripted_server.routes["/v1/chat/completions"] = lambda body: (503, {"error": "busy"})
    with pytest.raises(MeasurementError, match=r"warm-up request 1/3: .* answered 503: busy"):
        run_warmup(scripted_server.base_url, "m", WarmupSettings(num_prompts=3))


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2


def test_request_timeout_scales_with_output_length():
    assert TpsSettings(output_len=512).request_timeout_s == pytest.approx(30 + 0.1 * 512)
    assert TpsSettings(output_len=32).request_timeout_s == pytest.approx(33.2)
    assert TpsSettings(output_len=32, timeout_s=7).request_timeout_s == 7
    settings = TpsSettings(output_len=100, timeout_base_s=1, timeout_per_token_s=0.01)
    assert settings.request_timeout_s == pytest.approx(2.0)
    assert settings.to_dict()["request_timeout_s"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="timeout_per_token_s"):
        TpsSettings(timeout_per_token_s=-1)


def test_tps_stops_at_the_first_request_that_times_out(scripted_server):
    """A stand-in for a server that hangs mid-benchmark: the second request never
    gets an answer in time. The run stops there instead of waiting once per prompt."""
    calls = []

    def tokens(body):
        calls.append(time.monotonic())
        if len(calls) == 2:
            time.sleep(3.0)  # longer than the request timeout below
        return 16

    scripted_server.routes["/v1/chat/completions"] = chat_route(tokens)
    settings = TpsSettings(
        num_prompts=4,
        output_len=16,
        warmup_requests=0,
        timeout_base_s=0.6,
        timeout_per_token_s=0.0,
        order="given",
    )
    began = time.monotonic()
    result = measure_tps(scripted_server.base_url, "m", PROMPTS, settings, spec_metrics=False)
    assert time.monotonic() - began < 2.5  # one timeout, not three
    assert len(calls) == 2
    assert (result.completed, result.total, result.tps) == (1, 4, None)
    assert result.requests[1].error.startswith("timed out after 1 s")
    assert [r.error for r in result.requests[2:]] == [f"not sent: {result.requests[1].error} (at request 1)"] * 2


# The order in which sglang.bench_serving 0.5.2 (the harness's client, --seed 1) sends
# 48 ShareGPT records whose ids are tune-000 ... tune-047 in file order: read from its
# own sampler (sample_sharegpt_requests) and from the request log of a run against the
# demo server. Its warm-up is --warmup-requests copies of the first of these.
HARNESS_ORDER_48_SEED_1 = [
    44,
    15,
    45,
    9,
    5,
    35,
    2,
    14,
    19,
    34,
    33,
    46,
    40,
    26,
    11,
    38,
    37,
    12,
    21,
    17,
    20,
    22,
    29,
    32,
    10,
    3,
    18,
    43,
    25,
    23,
    47,
    41,
    0,
    27,
    39,
    1,
    42,
    6,
    13,
    24,
    30,
    28,
    31,
    7,
    16,
    4,
    36,
    8,
]


def test_default_protocol_sends_what_the_harness_client_sends(scripted_server):
    """Warm-up: 4 concurrent copies of the first measured prompt at min(output_len, 32)
    tokens, then a 1 s pause; then the prompts one by one in the harness's seeded order."""
    changed = threading.Condition()
    in_flight = [0, 0]  # now, most at once
    times: list[tuple[float, float, int]] = []

    def tokens(body):
        began = time.monotonic()
        with changed:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
            changed.notify_all()
            if body["max_tokens"] == 32:  # hold each warm-up until all 4 are in (or 5 s)
                changed.wait_for(lambda: in_flight[1] >= 4, timeout=5.0)
        with changed:
            in_flight[0] -= 1
            times.append((began, time.monotonic(), body["max_tokens"]))
        return body["max_tokens"]

    scripted_server.routes["/v1/chat/completions"] = chat_route(tokens)
    prompts = [Prompt(id=f"tune-{i:03d}", text=f"text of record {i}") for i in range(48)]
    settings = TpsSettings(num_prompts=48, output_len=128)
    result = measure_tps(scripted_server.base_url, "m", prompts, settings, spec_metrics=False)
    assert result.ok and result.output_tokens == 48 * 128
    chats = [body for path, body in scripted_server.requests if path == "/v1/chat/completions"]
    assert len(chats) == 4 + 48
    warm, measured = chats[:4], chats[4:]
    first = f"text of record {HARNESS_ORDER_48_SEED_1[0]}"
    assert [(b["messages"][0]["content"], b["max_tokens"]) for b in warm] == [(first, 32)] * 4
    assert in_flight[1] == 4  # the warm-up requests were in flight together
    assert [b["messages"][0]["content"] for b in measured] == [f"text of record {i}" for i in HARNESS_ORDER_48_SEED_1]
    assert {b["max_tokens"] for b in measured} == {128}
    assert [r.prompt_id for r in result.requests] == [f"tune-{i:03d}" for i in HARNESS_ORDER_48_SEED_1]
    warm_end = max(end for _, end, n in times if n == 32)
    first_measured = min(start for start, _, n in times if n == 128)
    assert first_measured - warm_end >= 1.0  # the harness sleeps 1 s before its timer
    assert result.warmup_duration_s >= 1.0


def test_a_subset_is_the_first_of_the_harness_shuffle_and_the_old_protocol_stays():
    prompts = [Prompt(id=f"tune-{i:03d}", text="t") for i in range(48)]
    # the harness shuffles the whole file, then takes the first --num-prompts
    picked = select_prompts(prompts, TpsSettings(num_prompts=16))
    assert [p.id for p in picked] == [f"tune-{i:03d}" for i in HARNESS_ORDER_48_SEED_1[:16]]
    given = select_prompts(prompts, TpsSettings(num_prompts=16, order="given"))
    assert [p.id for p in given] == [f"tune-{i:03d}" for i in range(16)]
    other_seed = select_prompts(prompts, TpsSettings(num_prompts=48, seed=2))
    assert [p.id for p in other_seed] != [p.id for p in select_prompts(prompts, TpsSettings(num_prompts=48))]
    assert sorted(p.id for p in other_seed) == sorted(p.id for p in prompts)
    with pytest.raises(ValueError, match="order"):
        TpsSettings(order="sorted")
    with pytest.raises(ValueError, match="warmup"):
        TpsSettings(warmup="parallel")
    with pytest.raises(ValueError, match="warmup_pause_s"):
        TpsSettings(warmup_pause_s=-1)


def test_a_failed_concurrent_warmup_is_a_measurement_error(scripted_server):
    scripted_server.routes["/v1/chat/completions"] = chat_route(lambda body: (500, {"error": {"message": "no"}}))
    with pytest.raises(MeasurementError, match=r"TPS warm-up: 2 of 2 concurrent requests \(p3\)"):
        measure_tps(
            scripted_server.base_url,
            "m",
            PROMPTS,
            TpsSettings(num_prompts=1, output_len=16, warmup_requests=2, warmup_pause_s=0),
            spec_metrics=False,
        )
