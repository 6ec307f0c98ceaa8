"""``benchmarks/gpu_parity.sh``: what it says and returns before any GPU work (its parts need the GPU)."""

from __future__ import annotations

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
