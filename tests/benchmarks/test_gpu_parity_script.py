"""``benchmarks/gpu_parity.sh``: what it says and returns before any GPU work (its parts need the GPU)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_parity.sh"


def _script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable, **env},
        check=False,
    )


def test_plan_counts_a_run_for_each_side_of_a_round() -> None:
    assert "2 runs a round" in _script("plan").stdout
    assert "3 runs a round" in _script("plan", OURS_IDLE_S="8.5").stdout
    both = _script("plan", OURS_CONNECTION="harness,keep-alive", OURS_IDLE_S="8.5").stdout
    assert "4 runs a round" in both


def test_a_part_that_fails_returns_its_exit_code(tmp_path) -> None:
    client = tmp_path / "bench_serving.py"
    client.write_text("raise SystemExit('never run')\n")
    done = _script(
        "smoke", PARITY_DIR=str(tmp_path / "parity"), BENCH_SERVING=str(client), MANIFEST=str(tmp_path / "missing.json")
    )
    assert done.returncode == 2, done.stdout[-2000:]
    assert "hold_server: " in done.stdout and "missing.json: no such file" in done.stdout
    assert (tmp_path / "parity" / "smoke.done").read_text().strip() == "2"
    assert "Traceback" not in done.stdout


def test_a_part_needs_the_clients_file(tmp_path) -> None:
    done = _script("smoke", PARITY_DIR=str(tmp_path), BENCH_SERVING=str(tmp_path / "absent.py"))
    assert done.returncode == 2 and "set BENCH_SERVING" in done.stderr


def test_part2_refuses_big_rounds_it_would_not_run(tmp_path) -> None:
    # 2026-12-03 14:30: BIG_ROUNDS=1 for part2 without PART2_BIG ran no round at 128x512 at all
    client = tmp_path / "bench_serving.py"
    client.write_text("raise SystemExit('never run')\n")
    env = {"PARITY_DIR": str(tmp_path / "parity"), "BENCH_SERVING": str(client), "MANIFEST": str(tmp_path / "no.json")}
    for command in (("part2",), ("start", "part2")):
        refused = _script(*command, BIG_ROUNDS="1", **env)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.strip() == (
            "part2 runs no rounds at 128x512 unless PART2_BIG=1: set PART2_BIG=1 "
            "for BIG_ROUNDS=1 there, or PART2_BIG=0 for none"
        )
        assert not (tmp_path / "parity" / "running").exists() and not (tmp_path / "parity" / "part2").exists()
    asked, declined, default = {"BIG_ROUNDS": "1", "PART2_BIG": "1"}, {"BIG_ROUNDS": "1", "PART2_BIG": "0"}, {}
    for settings in (asked, declined, default):
        accepted = _script("part2", **settings, **env)
        assert accepted.returncode == 2 and "PART2_BIG" not in accepted.stderr
        assert "no.json: no such file" in accepted.stdout  # it went on to start the server


def test_a_started_part_runs_its_own_copy_of_the_client(tmp_path) -> None:
    # on the device a later call that does not carry .harness-client removes it from the checkout
    # while the part runs (2026-12-03 14:09: five rounds lost their harness runs that way)
    client = tmp_path / "harness-client" / "bench_serving.py"
    client.parent.mkdir()
    client.write_text("raise SystemExit('the harness client, never run here')\n")
    parity = tmp_path / "parity"
    env = {"PARITY_DIR": str(parity), "BENCH_SERVING": str(client), "MANIFEST": str(tmp_path / "missing.json")}
    started = _script("start", "smoke", **env)
    client.unlink()  # gone before the background part has looked for it
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 60
    while not (parity / "smoke.done").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    log = (parity / "smoke.log").read_text()
    assert (parity / "smoke.done").read_text().strip() == "2", log  # the server's failure, not the client's
    assert "missing.json: no such file" in log
    assert "set BENCH_SERVING" not in (parity / "smoke.nohup").read_text() + log
    copy = parity / "client" / "bench_serving.py"
    assert copy.read_text() == "raise SystemExit('the harness client, never run here')\n"
    again = _script("smoke", **{**env, "BENCH_SERVING": str(copy)})  # the copy itself: not copied onto itself
    assert again.returncode == 2 and "could not copy" not in again.stderr and "same file" not in again.stderr


def test_a_part_judges_its_runs_at_the_challenges_size_by_the_confirming_rule(tmp_path) -> None:
    # the part's server cannot start (no manifest), so only the files already there are judged
    part = tmp_path / "parity" / "smoke"
    part.mkdir(parents=True)
    run = {
        "ok": True,
        "output_lens": [512] * 128,
        "input_lens": [40] * 128,
        "server": {"requests": 132, "e2e_s": 58.0, "decode_s": 57.0},
    }  # what the run's summary reads
    rounds = [
        {
            "round": n,
            "first": "harness",
            "order": ["harness", "ours"],
            "harness": {**run, "tps": 1000.0},
            "ours": {**run, "tps": 1000.0 * ratio, "same_order": True},
        }
        for n, ratio in enumerate((1.004, 0.996, 1.001))
    ]
    host = {"seconds": 90, "median_cpu_ms": 0.77, "low_quartile_cpu_ms": 0.76, "high_quartile_cpu_ms": 0.78}
    (part / "whole-128x512.json").write_text(
        json.dumps({"sizes": {"128x512": {"rounds": rounds, "host_before": host}}})
    )
    client = tmp_path / "bench_serving.py"
    client.write_text("raise SystemExit('never run')\n")
    done = _script(
        "smoke", PARITY_DIR=str(tmp_path / "parity"), BENCH_SERVING=str(client), MANIFEST=str(tmp_path / "missing.json")
    )
    assert done.returncode == 2  # the part's own code, not the verdict's
    assert "== smoke: the confirming-run rule" in done.stdout
    assert "a quiet host" in done.stdout and "3 pairs" in done.stdout
    assert "verdict: whole runs confirm" in done.stdout and "no per-request figures at 128x512" in done.stdout


def _probe_file(path: Path, cpu_ms: list[float]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"t": 1796289000.0 + n, "cpu_ms": value, "mem_ms": 3.0, "n": 10}) for n, value in enumerate(cpu_ms)
    ]
    path.write_text("\n".join(lines) + '\n{"t": 17962')  # a torn last line, as from a probe still writing
    return path


def test_host_judges_the_probe_so_far_by_the_fixed_cut(tmp_path) -> None:
    quiet = [0.76, 0.77, 0.78, 0.75, 0.79, 1.4]  # one busy second does not move the median
    busy = [1.2, 1.6, 1.9, 0.8, 2.0, 1.5, 1.3]
    for part, values, code, word in (("q", quiet, 0, "quiet"), ("b", busy, 1, "busy")):
        _probe_file(tmp_path / part / "probe.jsonl", values)
        done = _script("host", part, PARITY_DIR=str(tmp_path))
        low, median, high = statistics.quantiles(values, n=4, method="inclusive")
        assert done.returncode == code, done.stdout + done.stderr
        assert done.stdout.strip() == (
            f"== {part}: the host so far: probe cpu_ms median {median:.3f} (quartiles "
            f"{low:.3f} and {high:.3f}, {len(values)} s): a {word} host"
        )
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "probe.jsonl").write_text('{"t": 1796289000.0, "mem_ms": 3.0}\n')
    for part in ("empty", "absent"):
        done = _script("host", part, PARITY_DIR=str(tmp_path))
        assert done.returncode == 3 and "no probe figures" in done.stdout and "Traceback" not in done.stderr
    missing = _script("host", PARITY_DIR=str(tmp_path))
    assert missing.returncode == 2 and missing.stderr.strip() == "host needs a part: host part1"


def test_a_busy_host_skips_the_per_request_pass_only_when_asked(tmp_path) -> None:
    # the steps alone, against no server (the per-request benchmark then fails at once): what matters
    # is whether it was started, which its banner line says
    _probe_file(tmp_path / "part1" / "probe.jsonl", [1.6, 1.7, 1.8])
    client = tmp_path / "bench_serving.py"
    client.write_text("raise SystemExit('never run')\n")
    env = {
        "PARITY_DIR": str(tmp_path),
        "BENCH_SERVING": str(client),
        "PARITY_BASE_URL": "http://127.0.0.1:9",
        "PARITY_MODEL": "m",
        "PARITY_SERVER_PID": "1",
        "PER_REQUEST_FIRST": "1",
        "PROBE_CPUS": "13",
        "MANIFEST": str(tmp_path / "missing.json"),
    }
    asked = _script("_steps", "part1", PER_REQUEST_IF_QUIET="1", **env)
    assert "the host is not quiet so far, so no per-request pass" in asked.stdout
    assert "per request, 1 passes" not in asked.stdout
    not_asked = _script("_steps", "part1", **env)
    assert "per request, 1 passes of 48 x 128" in not_asked.stdout and "not quiet so far" not in not_asked.stdout
    _probe_file(tmp_path / "part1" / "probe.jsonl", [0.76, 0.77, 0.78])
    quiet = _script("_steps", "part1", PER_REQUEST_IF_QUIET="1", **env)
    assert "a quiet host" in quiet.stdout and "per request, 1 passes of 48 x 128" in quiet.stdout
