"""``benchmarks/tps_ours_client.py``, the parity benchmark's side ``ours``, against the shared real vLLM server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "benchmarks" / "tps_ours_client.py"


def _run(tiny_server, demo, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            "--base-url",
            tiny_server.base_url,
            "--model",
            tiny_server.served_model_name,
            "--prompts",
            str(demo.prompts_tuning),
            "--num-prompts",
            "2",
            "--output-len",
            "8",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.server
def test_the_idle_comes_before_the_warm_up_and_the_timed_requests(tiny_server, demo, tmp_path) -> None:
    out = tmp_path / "idle.json"
    launched = time.time()
    done = _run(tiny_server, demo, out, "--idle-before-s", "2.5")
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    requests = data["result"]["requests"]
    assert [r["output_tokens"] for r in requests] == [8, 8]
    assert data["idle_before_s"] >= 2.5
    # the warm-up ends after the idle, then the 1 s pause, then the first timed request: by this
    # process's clock, and by the unix clock read here before the client was launched
    assert data["warmup_done_s"] > data["idle_before_s"]
    first_start = data["started_unix"] + data["request_ends_s"][0] - requests[0]["latency_s"]
    assert first_start >= launched + 2.5 + 1.0
    assert data["request_ends_s"][0] - requests[0]["latency_s"] >= data["warmup_done_s"] + 1.0 - 0.05


@pytest.mark.server
def test_without_the_option_there_is_no_idle(tiny_server, demo, tmp_path) -> None:
    out = tmp_path / "plain.json"
    done = _run(tiny_server, demo, out)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["idle_before_s"] < 0.1 and len(data["result"]["requests"]) == 2


@pytest.mark.parametrize("value", ["-1", "601"])
def test_an_idle_out_of_range_is_refused_before_anything_is_sent(value, tmp_path) -> None:
    out = tmp_path / "never.json"
    done = subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--prompts",
            "missing.json",
            "--out",
            str(out),
            "--idle-before-s",
            value,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--idle-before-s: 0 to 600 seconds" in done.stderr
    assert not out.exists()
