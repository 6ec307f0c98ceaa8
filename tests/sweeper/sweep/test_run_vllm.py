"""`sweeper run` with real vLLM on the tiny model: a real study, SIGKILL mid-trial, resume.

One test, because each trial starts a real server: the first run is killed
with SIGKILL while a trial's server is up; the same command run again must
keep the completed trial, handle the stale one, leave no server behind and
finish a study of at least three measured trials, one of them rejected by
the PPL gate (an enqueued window far below the trained one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from storage import TrialStore, pareto_front, study_status
from sweeper.cli._study_view import phase_lines
from sweeper.demo import DemoPaths
from sweeper.measure import duration_text, start_seconds
from sweeper.serving import START_PHASES, TOKEN_VARIABLE, processes
from sweeper.study import is_baseline, is_confirmation

pytestmark = pytest.mark.server

STUDY = "resume-test"


def run_command(tmp_path: Path, url: str, smallest_window: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sweeper",
        "run",
        "--study",
        STUDY,
        "--storage",
        url,
        "--run-dir",
        str(tmp_path / "runs"),
        "--n-trials",
        "4",
        "--num-prompts",
        "2",
        "--output-len",
        "32",
        "--warmup-requests",
        "0",
        "--warmup-prompts",
        "4",
        "--enqueue",
        f"sliding_window={smallest_window}",
        "--confirm-rounds",
        "0",  # a test of kill and resume: the budget's trials only
        "--json",
    ]


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_study_survives_sigkill_and_resumes(tmp_path: Path, demo: DemoPaths):
    from search_spaces import load_preset

    smallest = load_preset("tiny-cpu").parameter("sliding_window").low
    url = f"sqlite:///{tmp_path / 'study.db'}"
    command = run_command(tmp_path, url, smallest)
    store = TrialStore(url)
    log = open(tmp_path / "first-run.log", "wb")
    first = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    tokens: set[str] = set()
    try:

        def second_trial_serving():
            try:
                records = store.records(STUDY)
            except Exception:  # noqa: BLE001 - the tables may not exist yet
                return None
            done = [r for r in records if r.state == "complete"]
            running = [r for r in records if r.state == "running" and r.server_token]
            for record in records:
                if record.server_token:
                    tokens.add(record.server_token)
            if done and running and processes.pids_with_env(TOKEN_VARIABLE, running[0].server_token):
                return running[0]
            return None

        victim = wait_for(second_trial_serving, 900, "a completed trial and a running server")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    killed_at = time.monotonic()
    completed_before = {r.number: (r.tps, r.ppl) for r in store.records(STUDY) if r.state == "complete"}
    assert completed_before

    # the killed sweeper's server gets SIGTERM from the kernel (parent-death signal) and
    # vLLM shuts its engine down: no process of that server survives for long
    wait_for(
        lambda: not processes.pids_with_env(TOKEN_VARIABLE, victim.server_token),
        60,
        "the killed sweeper's server to exit",
    )
    print(f"server of the killed sweeper gone {time.monotonic() - killed_at:.1f} s after SIGKILL")
    # whatever would still be shutting down is stopped by the resumed sweeper through its token
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout.strip().splitlines()[-1])

    records = {r.number: r for r in store.records(STUDY, details=True)}
    for record in records.values():
        if record.server_token:
            tokens.add(record.server_token)
    # nothing completed was lost or changed
    for number, figures in completed_before.items():
        assert records[number].state == "complete"
        assert (records[number].tps, records[number].ppl) == figures
    # the stale trial was marked failed in Optuna, "stale" in our table, and queued again
    stale = records[victim.number]
    assert stale.state == "stale"
    assert stale.error_kind == "WorkerDied"
    frozen = optuna.load_study(study_name=STUDY, storage=url).trials[victim.number]
    assert frozen.state == optuna.trial.TrialState.FAIL
    assert "worker" in (stale.error_message or "").lower() or "stale" in (stale.error_message or "").lower()
    retried = [r for r in records.values() if r.number > victim.number and dict(r.params) == dict(stale.params)]
    assert retried, "the killed trial's configuration was not run again"

    complete = [r for r in records.values() if r.state == "complete"]
    assert len(complete) >= 3
    baseline = records[0]
    assert baseline.role == "baseline"
    cap = baseline.ppl * 1.05
    rejected = [r for r in complete if r.feasible is False]
    assert any(r.params["sliding_window"] == smallest for r in rejected)
    for record in rejected:
        assert record.ppl > cap * 0.999 or record.early_stopped
    for record in complete:
        assert record.ppl_cap == pytest.approx(cap, rel=1e-6)
        env = record.manifest["env"]
        assert env["SLIDING_WINDOW"] == str(record.params["sliding_window"])
        assert (
            json.loads(env["SPECULATIVE_CONFIG"])["num_speculative_tokens"] == record.params["num_speculative_tokens"]
        )
        phases = dict(record.phases)
        # the start split by the server's log into START_PHASES, in their order (no whole "start")
        start_names = [name for name, _ in record.phases if name in START_PHASES]
        assert start_names == [name for name in START_PHASES if name in start_names]
        assert start_names[0] == "api imports" and start_names[-1] == "api ready" and "kv cache" in start_names
        assert "start" not in phases and start_seconds(phases) > 0 and phases["teardown"] > 0
        # searched trials start warm (the API server's imports done once, in the launcher); the servers a
        # claim may rest on (the base manifest's own trial, race servers) fresh
        claimed = is_confirmation(record.role) or is_baseline(record.role)
        assert record.extras["server_start"] == ("fresh" if claimed else "warm")
        if record.extras["server_start"] == "fresh":
            assert phases["api imports"] >= 1.0
        # the phases account for the trial's wall time (the rest: rendering, storing, a few ms)
        wall = (record.finished_at - record.started_at).total_seconds()
        assert 0.85 * wall <= sum(seconds for _, seconds in record.phases) <= wall + 0.5
        assert phases.get("ppl", 0) > 0 or record.ppl_reused_from is not None
        if not record.early_stopped:
            assert phases["tps"] > 0
            assert record.tps > 0
            assert record.extras["completed"] == record.extras["total"] == 2
    # the Pareto set: feasible trials not dominated in (TPS up, PPL down)
    feasible = [r for r in complete if r.feasible]
    expected = {
        r.number
        for r in feasible
        if not any(o.tps >= r.tps and o.ppl <= r.ppl and (o.tps > r.tps or o.ppl < r.ppl) for o in feasible)
    }
    assert {r.number for r in pareto_front(records.values())} == expected
    assert {entry["number"] for entry in summary["pareto"]} == expected
    best = max(feasible, key=lambda r: r.tps)
    assert summary["best"]["number"] == best.number

    # status shows the study's server time by phase, summed from the stored phases
    time_lines = phase_lines(study_status(url, STUDY))
    total = sum(seconds for r in records.values() for _, seconds in r.phases)
    servers = sum(1 for r in records.values() if r.phases)
    assert time_lines[0].startswith(f"time: {duration_text(total)} of server time in {servers} servers (")
    measuring = sum(s for r in records.values() for n, s in r.phases if n in ("ppl", "warmup", "tps"))
    assert f"{measuring / total * 100:.1f} % measuring" in time_lines[0]
    labels = [line.split("  ")[1].strip() for line in time_lines[1:]]
    assert labels[0] == "API imports" and labels[-1] == "stop"
    warm = sum(1 for r in records.values() if r.extras.get("server_start") == "warm")
    assert warm >= 1 and f"({warm} started warm)" in time_lines[0]

    # no server of any trial is left
    for token in tokens:
        assert processes.pids_with_env(TOKEN_VARIABLE, token) == []
    assert os.path.exists(tmp_path / "runs" / STUDY)
