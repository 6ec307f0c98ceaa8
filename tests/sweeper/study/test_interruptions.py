"""A worker killed or signalled mid-trial: nothing measured is lost, nothing is left running."""

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
import toy

import sweeper
from storage import TrialOutcome, TrialStore
from sweeper.errors import ServerError, StudyError
from sweeper.serving import TOKEN_VARIABLE, processes
from sweeper.study import Measurement, PplGate, StudyOptions

WORKER = Path(__file__).resolve().parent / "worker.py"
REPO = Path(__file__).resolve().parents[3]


def start_worker(tmp_path: Path, **config) -> subprocess.Popen:
    config = {
        "storage": f"sqlite:///{tmp_path / 'study.db'}",
        "study": "toy",
        "log": str(tmp_path / "evaluations.jsonl"),
        "seed": 1,
        **config,
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for(path: Path, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"worker exited early: {process.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.1)


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_sigkilled_worker_resumes_without_losing_a_trial(tmp_path: Path) -> None:
    worker = start_worker(tmp_path, n_trials=5, hang_on=[2])
    wait_for(tmp_path / "hanging-2", worker)
    worker.kill()  # SIGKILL: no cleanup at all
    worker.wait(timeout=30)
    server_pid = int((tmp_path / "server-2").read_text())
    assert not process_gone(server_pid), "the stand-in server should outlive its worker"
    store = TrialStore(f"sqlite:///{tmp_path / 'study.db'}")
    before = {r.number: r for r in store.records("toy")}
    assert [before[n].state for n in (0, 1, 2)] == ["complete", "complete", "running"]
    token_2 = before[2].server_token
    assert token_2 is not None and token_2.startswith("token-2-")

    # the same command again, in this process (same host, the old pid is dead)
    result = sweeper.run_study(
        toy.SPACE,
        toy.evaluate,
        StudyOptions(
            study_name="toy",
            storage=f"sqlite:///{tmp_path / 'study.db'}",
            n_trials=5,
            gate=PplGate(cap=toy.CAP),
            sampler="random",
            seed=1,
            handle_signals=False,
        ),
    )
    deadline = time.monotonic() + 15
    while not process_gone(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process_gone(server_pid), "the server left behind was not stopped"
    after = {r.number: r for r in result.status.trials}
    # the measured trials are untouched
    for number in (0, 1):
        assert after[number].state == "complete"
        assert (after[number].tps, after[number].params) == (
            before[number].tps,
            before[number].params,
        )
    # the stale one is failed with the reason, and its configuration ran again
    assert after[2].state == "stale" and after[2].error_kind == "WorkerDied"
    assert f"worker pid {before[2].pid}" in after[2].error_message
    retry = after[3]
    assert retry.params == before[2].params and retry.state == "complete"
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert study.trials[2].state == optuna.trial.TrialState.FAIL
    assert study.trials[3].user_attrs["sweeper:retry_of"] == 2
    assert result.status.counts == {
        "COMPLETE": 5,
        "FAIL": 1,
        "RUNNING": 0,
        "WAITING": 0,
        "PRUNED": 0,
        "feasible": result.status.counts["feasible"],
        "infeasible": result.status.counts["infeasible"],
    }


def test_sigkilled_worker_s_server_dies_with_it_and_resume_stops_what_escaped(
    tmp_path: Path,
) -> None:
    """The worker runs a real ServerProcess on the stand-in fake_server.py (not vLLM),
    which starts a child in a session of its own, as a daemonizing serve.py or a
    detached engine would. SIGKILL of the worker: the server gets its parent-death
    signal and is gone within seconds; the escaped child is not (nothing signals it)
    until the next run stops it through the token, before its first trial."""
    worker = start_worker(tmp_path, n_trials=3, hang_on=[1], server="fake")
    wait_for(tmp_path / "hanging-1", worker)
    server_pid = int((tmp_path / "server-1").read_text())
    escaped_pid = int((tmp_path / "escaped.pid").read_text())
    worker.kill()
    worker.wait(timeout=30)
    killed_at = time.monotonic()
    while not process_gone(server_pid) and time.monotonic() - killed_at < 10:
        time.sleep(0.1)
    assert process_gone(server_pid), "the server outlived its worker by 10 s"
    survived_s = time.monotonic() - killed_at
    print(f"server gone {survived_s:.2f} s after its worker's SIGKILL")
    assert not process_gone(escaped_pid), "the escaped child should still be there"
    url = f"sqlite:///{tmp_path / 'study.db'}"
    token = TrialStore(url).record("toy", 1).server_token
    assert token is not None
    assert escaped_pid in processes.pids_with_env(TOKEN_VARIABLE, token)

    left_at_first_trial: list[list[int]] = []

    def evaluate(params, context):
        if not left_at_first_trial:
            left_at_first_trial.append(processes.pids_with_env(TOKEN_VARIABLE, token))
        return toy.evaluate(params, context)

    result = sweeper.run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name="toy",
            storage=url,
            n_trials=3,
            gate=PplGate(cap=toy.CAP),
            sampler="random",
            seed=1,
            handle_signals=False,
        ),
    )
    assert left_at_first_trial == [[]]  # stopped before the first trial of the resumed run
    assert process_gone(escaped_pid)
    records = {r.number: r for r in result.status.trials}
    assert (records[0].state, records[1].state, records[1].error_kind) == (
        "complete",
        "stale",
        "WorkerDied",
    )
    assert records[2].params == records[1].params and records[2].state == "complete"
    assert survived_s < 10


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_cleanly_and_the_trial_is_queued_again(tmp_path: Path, signum: int) -> None:
    worker = start_worker(tmp_path, n_trials=4, hang_on=[1])
    wait_for(tmp_path / "hanging-1", worker)
    worker.send_signal(signum)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    expected = "terminated" if signum == signal.SIGTERM else "interrupted"
    assert json.loads(out.strip().splitlines()[-1]) == {"stop_reason": expected, "trials_run": 2}
    assert (tmp_path / "cleanup-1").read_text() == "done"  # the evaluator's cleanup ran
    url = f"sqlite:///{tmp_path / 'study.db'}"
    interrupted = TrialStore(url).record("toy", 1)
    assert interrupted.state == "interrupted"
    assert interrupted.error_message == f"interrupted by {signal.Signals(signum).name}"
    study = optuna.load_study(study_name="toy", storage=url)
    states = [t.state for t in study.trials]
    assert states == [
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.FAIL,
        optuna.trial.TrialState.WAITING,
    ]
    assert study.trials[2].system_attrs["fixed_params"] == study.trials[1].params

    result = sweeper.run_study(
        toy.SPACE,
        toy.evaluate,
        StudyOptions(study_name="toy", storage=url, n_trials=4, gate=PplGate(cap=toy.CAP), handle_signals=False),
    )
    numbers = [(r.number, r.state) for r in result.status.trials]
    assert numbers == [
        (0, "complete"),
        (1, "interrupted"),
        (2, "complete"),
        (3, "complete"),
        (4, "complete"),
    ]
    assert result.status.trials[2].params == interrupted.params


def test_consecutive_failures_stop_with_a_pointer(tmp_path: Path) -> None:
    calls = []

    def evaluate(params, context):
        calls.append(context.number)
        if context.number == 0:
            return toy.evaluate(params, context)
        context.set_log_tail("loading model\nRuntimeError: CUDA out of memory")
        raise ServerError(f"server exited with code 1 during start-up (trial {context.number})")

    with pytest.raises(StudyError) as caught:
        sweeper.run_study(
            toy.SPACE,
            evaluate,
            StudyOptions(
                study_name="toy",
                storage=str(tmp_path / "s.db"),
                n_trials=10,
                gate=PplGate(cap=toy.CAP),
                max_consecutive_failures=3,
                handle_signals=False,
            ),
        )
    message = str(caught.value)
    assert calls == [0, 1, 2, 3]
    assert message.startswith("stopped after 3 consecutive failed trials (#1, #2, #3: oom-start)")
    assert "server exited with code 1 during start-up (trial 3)" in message
    assert "Last server log line: 'RuntimeError: CUDA out of memory'" in message
    assert "sweeper status --study toy --storage sqlite:///" in message and "--trial 3" in message
    records = TrialStore(str(tmp_path / "s.db")).records("toy")
    assert [r.state for r in records] == ["complete", "failed", "failed", "failed"]
    log_tail = records[3].log_tail
    assert log_tail is not None and log_tail.endswith("CUDA out of memory")


def test_failures_between_successes_do_not_stop_the_sweep(tmp_path: Path) -> None:
    def evaluate(params, context):
        if context.number % 2:
            raise ServerError("timeout", log_tail="still compiling")
        return Measurement(tps=toy.tps(params), ppl=toy.ppl(params))

    result = sweeper.run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name="toy",
            storage=str(tmp_path / "s.db"),
            n_trials=6,
            gate=PplGate(cap=toy.CAP),
            max_consecutive_failures=2,
            handle_signals=False,
        ),
    )
    assert [r.state for r in result.status.trials] == ["complete", "failed"] * 3
    assert result.status.trials[1].log_tail == "still compiling"
    assert result.status.counts["FAIL"] == 3 and result.best is not None


def test_a_bug_in_the_evaluator_is_raised_after_marking_the_trial(tmp_path: Path) -> None:
    def evaluate(params, context):
        raise KeyError("tps")

    with pytest.raises(KeyError):
        sweeper.run_study(
            toy.SPACE,
            evaluate,
            StudyOptions(
                study_name="toy",
                storage=str(tmp_path / "s.db"),
                n_trials=3,
                gate=PplGate(cap=toy.CAP),
                handle_signals=False,
            ),
        )
    record = TrialStore(str(tmp_path / "s.db")).record("toy", 0)
    assert (record.state, record.error_kind) == ("failed", "KeyError")
    study = optuna.load_study(study_name="toy", storage=str(f"sqlite:///{tmp_path / 's.db'}"))
    assert study.trials[0].state == optuna.trial.TrialState.FAIL


def _orphan(url: str, *, host: str, pid: int, state: str = "running", **outcome) -> int:
    """A RUNNING Optuna trial with our row, as a worker elsewhere would leave it."""
    import datetime

    import sqlalchemy

    study = optuna.load_study(study_name="toy", storage=url)
    trial = study.ask()
    params = toy.SPACE.suggest(trial)
    store = TrialStore(url)
    store.start_trial(
        study_name="toy",
        number=trial.number,
        optuna_trial_id=trial._trial_id,
        params=params,
        overrides={},
        role="sampled",
        host=host,
        pid=pid,
        ppl_cap=toy.CAP,
    )
    if state == "complete":
        store.finish_trial("toy", trial.number, TrialOutcome(state="complete", **outcome))
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    # a worker that went silent an hour ago: its heartbeat, set in the table directly
    trials = sqlalchemy.Table("sweeper_trials", sqlalchemy.MetaData(), autoload_with=store.engine)
    with store.engine.begin() as connection:
        connection.execute(trials.update().where(trials.c.number == trial.number).values(heartbeat_at=long_ago))
    store.close()
    return trial.number


def test_a_silent_worker_on_another_host_is_recovered(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    sweeper.run_study(
        toy.SPACE,
        toy.evaluate,
        StudyOptions(study_name="toy", storage=url, n_trials=1, gate=PplGate(cap=toy.CAP), handle_signals=False),
    )
    silent = _orphan(url, host="elsewhere", pid=1)
    told_late = _orphan(
        url, host="elsewhere", pid=1, state="complete", tps=321.0, ppl=1.1, ppl_cap=toy.CAP, feasible=True
    )
    result = sweeper.run_study(
        toy.SPACE,
        toy.evaluate,
        StudyOptions(
            study_name="toy", storage=url, n_trials=4, gate=PplGate(cap=toy.CAP), stale_after_s=60, handle_signals=False
        ),
    )
    records = {r.number: r for r in result.status.trials}
    assert records[silent].state == "stale"
    assert records[silent].error_message.startswith("worker on elsewhere silent for 36")
    # the recorded result of the other one is told to Optuna: it is not lost
    study = optuna.load_study(study_name="toy", storage=url)
    assert study.trials[told_late].state == optuna.trial.TrialState.COMPLETE
    assert study.trials[told_late].values == [321.0]
    assert study.trials[told_late].constraints["ppl_gate"] == pytest.approx(1.1 - toy.CAP)
    assert result.best.number == told_late
    retried = [r for r in result.status.trials if r.number > told_late]
    assert retried[0].params == records[silent].params and retried[0].state == "complete"


def test_heartbeats_are_recorded_while_a_trial_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    seen = []

    def evaluate(params, context):
        store = TrialStore(url)
        first = store.record("toy", context.number).heartbeat_at
        time.sleep(1.0)
        seen.append((first, store.record("toy", context.number).heartbeat_at))
        return toy.evaluate(params, context)

    sweeper.run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name="toy",
            storage=url,
            n_trials=1,
            gate=PplGate(cap=toy.CAP),
            stale_after_s=0.8,
            handle_signals=False,
        ),
    )
    first, later = seen[0]
    assert later > first
