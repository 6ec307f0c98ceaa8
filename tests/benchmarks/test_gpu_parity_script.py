"""``benchmarks/gpu_parity.sh``: what it says and returns before any GPU work (its parts need the GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_parity.sh"


def _script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, **env}, check=False)  # fmt: skip


def test_plan_counts_a_run_for_each_side_of_a_round() -> None:
    assert "2 runs a round" in _script("plan").stdout
    assert "3 runs a round" in _script("plan", OURS_IDLE_S="8.5").stdout
    both = _script("plan", OURS_CONNECTION="harness,keep-alive", OURS_IDLE_S="8.5").stdout
    assert "4 runs a round" in both


def test_a_part_that_fails_returns_its_exit_code(tmp_path) -> None:
    client = tmp_path / "bench_serving.py"
    client.write_text("raise SystemExit('never run')\n")
    done = _script("smoke", PARITY_DIR=str(tmp_path / "parity"), BENCH_SERVING=str(client),
                   MANIFEST=str(tmp_path / "missing.json"))  # fmt: skip
    assert done.returncode == 2, done.stdout[-2000:]
    assert "hold_server: " in done.stdout and "missing.json: no such file" in done.stdout
    assert (tmp_path / "parity" / "smoke.done").read_text().strip() == "2"
    assert "Traceback" not in done.stdout


def test_a_part_needs_the_clients_file(tmp_path) -> None:
    done = _script("smoke", PARITY_DIR=str(tmp_path), BENCH_SERVING=str(tmp_path / "absent.py"))
    assert done.returncode == 2 and "set BENCH_SERVING" in done.stderr


def test_a_part_judges_its_runs_at_the_challenges_size_by_the_confirming_rule(tmp_path) -> None:
    # the part's server cannot start (no manifest), so only the files already there are judged
    part = tmp_path / "parity" / "smoke"
    part.mkdir(parents=True)
    run = {"ok": True, "output_lens": [512] * 128, "input_lens": [40] * 128,
           "server": {"requests": 132, "e2e_s": 58.0, "decode_s": 57.0}}  # what the run's summary reads
    rounds = [{"round": n, "first": "harness", "order": ["harness", "ours"], "harness": {**run, "tps": 1000.0},
               "ours": {**run, "tps": 1000.0 * ratio, "same_order": True}}
              for n, ratio in enumerate((1.004, 0.996, 1.001))]  # fmt: skip
    host = {"seconds": 90, "median_cpu_ms": 0.77, "low_quartile_cpu_ms": 0.76, "high_quartile_cpu_ms": 0.78}
    (part / "whole-128x512.json").write_text(json.dumps({"sizes": {"128x512": {"rounds": rounds, "host_before": host}}}))
    client = tmp_path / "bench_serving.py"
    client.write_text("raise SystemExit('never run')\n")
    done = _script("smoke", PARITY_DIR=str(tmp_path / "parity"), BENCH_SERVING=str(client),
                   MANIFEST=str(tmp_path / "missing.json"))  # fmt: skip
    assert done.returncode == 2  # the part's own code, not the verdict's
    assert "== smoke: the confirming-run rule" in done.stdout
    assert "a quiet host" in done.stdout and "3 pairs" in done.stdout
    assert "verdict: whole runs confirm" in done.stdout and "no per-request figures at 128x512" in done.stdout
