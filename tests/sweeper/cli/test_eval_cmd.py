"""``sweeper eval``: exit codes, messages and output, run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluators import PplResult, PplSettings, RequestRecord, TpsResult, TpsSettings, load_ppl_records
from evaluators.spec_metrics import SpecDecodeStats


def run_eval(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweeper", "eval", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_ppl_data_fails_before_a_server_starts(demo, tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"id": "a", "context_token_ids": [2, 3], "target_token_ids": [4]}\n'
        '{"id": "b", "context_token_ids": [2, 3], "target_token_ids": "4 5"}\n'
    )
    log = tmp_path / "server.log"
    done = run_eval(str(demo.manifest), "--ppl", "--ppl-data", str(bad), "--log", str(log), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {bad}: record 1 (id 'b'): field 'target_token_ids' must be a list of integer token ids, not str"
    )
    assert not log.exists()  # no server was started


def test_token_ids_outside_the_vocabulary_fail_before_a_server_starts(demo, tmp_path: Path):
    bad = tmp_path / "vocab.jsonl"
    bad.write_text('{"id": "x", "context_token_ids": [2, 3], "target_token_ids": [4, 5000]}\n')
    vocab = json.loads((demo.model / "config.json").read_text())["vocab_size"]
    done = run_eval(str(demo.manifest), "--ppl-data", str(bad), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {bad}: record 0 (id 'x'): token id 5000 at position 3 is outside the model's vocabulary (size {vocab})"
    )


def test_prompts_too_long_for_the_output_length_fail_before_a_server_starts(demo):
    # the demo serves MAX_MODEL_LEN 1024: a chat-templated prompt plus 1000 tokens cannot fit
    done = run_eval(str(demo.manifest), "--tps", "--output-len", "1000", timeout=120)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {demo.prompts_tuning}: record 0 (id ")
    assert last.endswith("with 1000 output tokens that exceeds the server's max_model_len 1024")


@pytest.mark.server
def test_eval_json_on_the_demo(demo, tmp_path: Path):
    reference = tmp_path / "reference.json"
    done = run_eval(
        str(demo.manifest),
        "--num-prompts",
        "2",
        "--output-len",
        "24",
        "--warmup-requests",
        "1",
        "--warmup-prompts",
        "3",
        "--ppl-records",
        "4",
        "--save-reference",
        str(reference),
        "--reference-prompts",
        "2",
        "--log",
        str(tmp_path / "server.log"),
        "--json",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["ok"] is True
    assert (out["completed"], out["total"], out["output_tokens"]) == (2, 2, 48)
    assert out["tps"] == pytest.approx(48 / out["duration_s"])
    assert out["ppl_finite"] and out["ppl"] > 1.0 and out["ppl_records"] == 4
    assert out["ppl_tokens"] == load_ppl_records(demo.ppl_tuning).head(4).scored_tokens
    assert out["spec_drafts"] > 0 and out["mean_acceptance_length"] >= 1.0
    assert len(out["spec_per_position_acceptance"]) == 1  # the demo manifest: 1 speculative token
    assert out["warmup"]["requests"] == 3 and out["warmup"]["settings"]["seed"] == 42
    assert set(out["timings"]) >= {"ready", "warmup", "ppl", "tps", "teardown", "total"}
    assert out["timings"]["ready"] > 0
    assert out["reference_saved"] == str(reference)
    saved = json.loads(reference.read_text())
    assert [len(e["token_ids"]) for e in saved["entries"]] == [24, 24]
    assert len(out["details"]["tps"]["requests"]) == 2
    assert "Infinity" not in done.stdout and "NaN" not in done.stdout


def test_table_shows_the_figures():
    from rich.console import Console

    from sweeper.cli.eval_cmd import _table
    from sweeper.measure import EvalResult

    tps = TpsResult(
        settings=TpsSettings(num_prompts=2, output_len=10),
        tps=None,
        completed=1,
        total=2,
        output_tokens=10,
        duration_s=0.5,
        requests=(
            RequestRecord(index=0, prompt_id="a", ok=True, output_tokens=10, latency_s=0.25),
            RequestRecord(index=1, prompt_id="b", ok=False, error="HTTP 500: boom"),
        ),
        spec_decode=SpecDecodeStats(
            drafts=4,
            draft_tokens=12,
            accepted_tokens=6,
            accepted_per_position=(3, 2, 1),
            per_position_acceptance=(0.75, 0.5, 0.25),
            acceptance_rate=0.5,
            mean_acceptance_length=2.5,
        ),
    )
    ppl = PplResult(
        settings=PplSettings(),
        ppl=float("inf"),
        nll=float("inf"),
        tokens=20,
        records_scored=2,
        records_total=2,
        stopped_early=False,
        ppl_low=float("inf"),
        ppl_high=float("inf"),
        stderr_log_ppl=float("inf"),
        scores=(),
        duration_s=0.1,
    )
    result = EvalResult(
        manifest="m",
        overrides={},
        model="x",
        warmup=None,
        ppl=ppl,
        tps=tps,
        fidelity=None,
        timings={"ready": 1.0, "tps": 0.5},
    )
    console = Console(record=True, width=120)
    console.print(_table(result, ppl_cap=2.42))
    text = console.export_text()
    assert "FAILED" in text and "1/2" in text and "HTTP 500: boom" in text
    assert "inf (gate failure)" in text
    assert "2.500" in text and "0.75, 0.50, 0.25" in text
    assert not result.ok
    assert json.dumps(result.to_dict(), allow_nan=False)
