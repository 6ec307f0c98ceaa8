"""Prompt sets and PPL reference sets: loading, checking, splitting (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators import (
    PplRecordSet,
    check_ppl_records,
    check_prompt_lengths,
    load_ppl_records,
    load_prompts,
)
from sweeper.errors import DataError


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# -- the challenge's files ----------------------------------------------------


def test_challenge_files_load_with_the_published_counts(challenge_data: Path):
    prompts = load_prompts(challenge_data / "eval_prompts_sharegpt.json")
    records = load_ppl_records(challenge_data / "ppl_ground_truth_tokens.jsonl")
    assert len(prompts) == 128
    assert prompts[0].id == "mmlu_pro-000c2031fb"
    assert prompts[0].text.startswith("Answer the following multiple choice question.")
    assert records.summary() == {
        "records": 128,
        "context_tokens": 35348,
        "scored_tokens": 61797,
        "longest": 2943,
    }
    # the full model's limits: every record fits Gemma 4's vocabulary and MAX_MODEL_LEN 4096
    check_ppl_records(records, vocab_size=262144, max_model_len=4096)


def test_challenge_split_is_seeded_and_matches_between_prompts_and_records(challenge_data: Path):
    prompts = load_prompts(challenge_data / "eval_prompts_sharegpt.json")
    records = load_ppl_records(challenge_data / "ppl_ground_truth_tokens.jsonl")
    tuning, heldout = prompts.split(heldout_fraction=0.25, seed=7)
    assert (len(tuning), len(heldout)) == (96, 32)
    assert {p.id for p in tuning}.isdisjoint({p.id for p in heldout})
    assert {p.id for p in tuning} | {p.id for p in heldout} == {p.id for p in prompts}
    # file order is kept inside each part
    order = [p.id for p in prompts]
    assert [p.id for p in tuning] == [i for i in order if i in {p.id for p in tuning}]
    # the same seed gives the same split; the PPL set (same ids) splits the same way
    again_tuning, _ = prompts.split(heldout_fraction=0.25, seed=7)
    assert again_tuning == tuning
    ppl_tuning, ppl_heldout = records.split(heldout_fraction=0.25, seed=7)
    assert [r.id for r in ppl_heldout] == [p.id for p in heldout]
    # another seed, another split
    _, other = prompts.split(heldout_fraction=0.25, seed=8)
    assert {p.id for p in other} != {p.id for p in heldout}


def test_demo_sets_load(demo):
    assert len(load_prompts(demo.prompts_tuning)) > 0
    assert len(load_prompts(demo.prompts_heldout)) > 0
    for source in (demo.ppl_tuning, demo.ppl_heldout):
        records = load_ppl_records(source)
        assert records.scored_tokens > 0
        config = json.loads((demo.model / "config.json").read_text())
        check_ppl_records(records, vocab_size=config["vocab_size"], max_model_len=1024)


# -- other shapes and formats ---------------------------------------------------------


def test_prompt_score_shape_and_parquet_and_jsonl_prompts(tmp_path: Path):
    import pandas as pd

    rows = [
        {"id": "a", "prompt_token_ids": [2, 5, 6, 7, 8], "score_token_start": 2},
        {
            "id": "b",
            "prompt_token_ids": [2, 5, 6, 7, 8],
            "score_token_start": 1,
            "score_token_end": 3,
        },
    ]
    records = load_ppl_records(write_jsonl(tmp_path / "shape2.jsonl", rows))
    assert [(r.score_start, r.score_end, r.scored_tokens) for r in records] == [
        (2, 5, 3),
        (1, 3, 2),
    ]
    # saved in the challenge's shape when it fits, and loads back the same
    saved = load_ppl_records(records.save(tmp_path / "saved.jsonl"))
    assert saved.records == records.records

    parquet = tmp_path / "records.parquet"
    pd.DataFrame([{"id": "p", "context_token_ids": [2, 3], "target_token_ids": [4, 5, 6]}]).to_parquet(parquet)
    assert load_ppl_records(parquet).summary()["scored_tokens"] == 3

    prompts = load_prompts(write_jsonl(tmp_path / "prompts.jsonl", [{"id": "x", "prompt": "hello"}, {"prompt": "bye"}]))
    assert [(p.id, p.text) for p in prompts] == [("x", "hello"), ("1", "bye")]
    sharegpt = load_prompts(prompts.save(tmp_path / "prompts.json"))
    assert sharegpt.prompts == prompts.prompts


# -- bad data: a clear error naming the file, the record and the field -----------------


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [
                {"id": "a", "context_token_ids": [1, 2], "target_token_ids": [3]},
                {"id": "b", "context_token_ids": [1, 2], "target_token_ids": "3 4"},
            ],
            "record 1 (id 'b'): field 'target_token_ids' must be a list of integer token ids",
        ),
        (
            [{"id": "a", "context_token_ids": [1, 2.5], "target_token_ids": [3]}],
            "record 0 (id 'a'): field 'context_token_ids' must be a list of integer token ids, not a list holding 2.5",
        ),
        (
            [{"id": "a", "context_token_ids": [], "target_token_ids": [3]}],
            "record 0 (id 'a'): field 'context_token_ids' is empty",
        ),
        (
            [{"id": "a", "context_token_ids": [1], "target_token_ids": []}],
            "record 0 (id 'a'): field 'target_token_ids' is empty",
        ),
        (
            [{"id": "a", "tokens": [1, 2, 3]}],
            "record 0 (id 'a'): needs 'context_token_ids' + 'target_token_ids' or "
            "'prompt_token_ids' + 'score_token_start'",
        ),
        (
            [{"id": "a", "prompt_token_ids": [1, 2, 3], "score_token_start": 0}],
            "record 0 (id 'a'): field 'score_token_start' is 0",
        ),
        (
            [
                {
                    "id": "a",
                    "prompt_token_ids": [1, 2, 3],
                    "score_token_start": 1,
                    "score_token_end": 9,
                }
            ],
            "record 0 (id 'a'): field 'score_token_end' is 9",
        ),
        (
            [{"id": "a", "context_token_ids": [1, -4], "target_token_ids": [3]}],
            "record 0 (id 'a'): token id -4 at position 1 is negative",
        ),
        (
            [
                {"id": "a", "context_token_ids": [1], "target_token_ids": [3]},
                {"id": "a", "context_token_ids": [1], "target_token_ids": [3]},
            ],
            "record 1: id 'a' repeats record 0",
        ),
    ],
)
def test_bad_ppl_records_are_named(tmp_path: Path, rows: list[object], expected: str):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as caught:
        load_ppl_records(path)
    assert str(caught.value) == f"{path}: {expected}" or str(caught.value).startswith(f"{path}: {expected}")


def test_unreadable_files_are_named(tmp_path: Path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a", "context_token_ids": [1], "target_token_ids": [2]}\nnot json\n')
    with pytest.raises(DataError, match=r"broken\.jsonl: line 2 is not valid JSON"):
        load_ppl_records(broken)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty\.jsonl: the file is empty"):
        load_ppl_records(empty)
    with pytest.raises(DataError, match=r"missing\.jsonl: no such file"):
        load_ppl_records(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match=r"unknown file type '\.txt'"):
        (tmp_path / "x.txt").write_text("x")
        load_prompts(tmp_path / "x.txt")
    not_a_list = tmp_path / "object.json"
    not_a_list.write_text('{"id": "a"}')
    with pytest.raises(DataError, match=r"object\.json: "):
        load_prompts(not_a_list)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [{"id": "a", "conversations": [{"from": "gpt", "value": "hi"}]}],
            "record 0 (id 'a'): field 'conversations' has no human turn",
        ),
        (
            [{"id": "a", "conversations": [{"from": "human", "value": "   "}]}],
            "record 0 (id 'a'): field 'conversations[0].value' is empty",
        ),
        (
            [{"id": "a", "prompt": "ok"}, {"id": "b", "question": "?"}],
            "record 1 (id 'b'): needs a field 'conversations' (ShareGPT) or 'prompt'",
        ),
    ],
)
def test_bad_prompts_are_named(tmp_path: Path, rows: list[object], expected: str):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError) as caught:
        load_prompts(path)
    assert str(caught.value).startswith(f"{path}: {expected}")


def test_records_checked_against_the_model(challenge_data: Path):
    records = load_ppl_records(challenge_data / "ppl_ground_truth_tokens.jsonl")
    with pytest.raises(DataError) as caught:
        check_ppl_records(records, vocab_size=1024)
    assert str(caught.value) == (
        f"{records.source}: record 0 (id 'mmlu_pro-000c2031fb'): token id 2364 at position 2 "
        "is outside the model's vocabulary (size 1024)"
    )
    with pytest.raises(DataError) as caught:
        check_ppl_records(records, max_model_len=2048)
    assert "record 85 (id 'gpqa_diamond-1d37a7a51d'): 2943 tokens do not fit the server's max_model_len 2048" in str(
        caught.value
    )


def test_prompt_lengths_checked_with_a_token_counter(challenge_data: Path):
    prompts = load_prompts(challenge_data / "eval_prompts_sharegpt.json")
    words = lambda text: len(text.split())  # noqa: E731 - a stand-in tokenizer
    longest = check_prompt_lengths(prompts, count_tokens=words, output_len=512, max_model_len=4096)
    assert longest == max(len(p.text.split()) for p in prompts)
    with pytest.raises(
        DataError,
        match=r"record \d+ \(id '.+'\) has \d+ prompt tokens; with 512 "
        r"output tokens that exceeds the server's max_model_len 600",
    ):
        check_prompt_lengths(prompts, count_tokens=words, output_len=512, max_model_len=600)


def test_split_rejects_duplicate_ids_and_bad_fractions():
    from evaluators._tables import split_items

    with pytest.raises(DataError, match="not unique"):
        split_items(["a", "a"], str, heldout_fraction=0.5, seed=0)
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_items(["a"], str, heldout_fraction=1.5, seed=0)
    assert split_items(list("abcd"), str, heldout_fraction=0.0, seed=0) == (list("abcd"), [])


def test_empty_record_set_head():
    assert len(PplRecordSet(source="x", records=()).head(3)) == 0
