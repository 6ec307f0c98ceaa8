"""Several workers on one study: GPU groups, CPU shares, and two worker processes on
one SQLite study whose stand-in servers each see their own CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

import optuna
import pytest

from storage import TrialStore, study_status
from sweeper.cli._study_view import running_devices
from sweeper.errors import UserInputError
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, run_study, standing
from sweeper.sweep import RunPlan, gpu_groups, prepare, run_workers, worker_slot
from sweeper.sweep._workers import WorkerSpec, _report, cpu_shares, parse_gpus, tensor_parallel_size, worker_specs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workers_standin  # noqa: E402

TOY = Path(__file__).resolve().parents[1] / "study"
sys.path.insert(0, str(TOY))
import toy  # noqa: E402


def test_gpus_split_into_groups_of_the_tensor_parallel_size() -> None:
    gpus = parse_gpus("0, 1,2,3")
    assert gpus == ("0", "1", "2", "3")
    assert gpu_groups(gpus) == (("0",), ("1",), ("2",), ("3",))
    assert gpu_groups(gpus, tensor_parallel_size({"TENSOR_PARALLEL_SIZE": "2"})) == (
        ("0", "1"),
        ("2", "3"),
    )
    assert gpu_groups(parse_gpus("GPU-a,GPU-b"), 2) == (("GPU-a", "GPU-b"),)
    with pytest.raises(UserInputError, match="3 GPU\\(s\\) do not split into groups of TENSOR_PARALLEL_SIZE=2"):
        gpu_groups(parse_gpus("0,1,2"), 2)
    with pytest.raises(UserInputError, match="GPU 1 listed twice"):
        parse_gpus("0,1,1")
    with pytest.raises(UserInputError, match="expected GPU ids"):
        parse_gpus("0,,1")
    with pytest.raises(UserInputError, match="TENSOR_PARALLEL_SIZE='two'"):
        tensor_parallel_size({"TENSOR_PARALLEL_SIZE": "two"})


def test_cpu_cores_are_shared_out_evenly() -> None:
    assert cpu_shares(2, [0, 1]) == ["0", "1"]
    assert cpu_shares(2, [4, 5, 6, 7, 8]) == ["4,5", "6,7"]
    assert cpu_shares(3, [0, 1]) == [None, None, None]
    specs = worker_specs([("0",), ("1",)], "/runs/study")
    assert [s.log_path for s in specs] == ["/runs/study/worker-0.log", "/runs/study/worker-1.log"]
    assert [s.cpus for s in specs] == cpu_shares(2)
    # tensor parallel: one core list per rank, as VLLM_CPU_OMP_THREADS_BIND takes them
    tp = worker_specs([("0", "1"), ("2", "3")], cores=range(8))
    assert [s.cpus for s in tp] == ["0,1|2,3", "4,5|6,7"]
    assert [s.cpus for s in worker_specs([("0", "1"), ("2", "3")], cores=[0, 1])] == [None, None]


def test_worker_slot_sets_the_servers_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPER_WORKER_CPUS", "1")
    slot = worker_slot("2,3", {"TENSOR_PARALLEL_SIZE": "2"})
    assert slot.server_env() == {"CUDA_VISIBLE_DEVICES": "2,3", "VLLM_CPU_OMP_THREADS_BIND": "1"}
    monkeypatch.delenv("SWEEPER_WORKER_CPUS")
    plain = worker_slot(None, {})  # a plain run on a machine without GPUs: nothing to do
    assert plain.server_env() == {} and plain.watched == () and plain.describe() == {"devices": "none"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    inherited = worker_slot(None, {})  # watched, not set: the manifest keeps its say
    assert inherited.server_env() == {}
    with pytest.raises(UserInputError, match="do not split"):
        worker_slot("0,1,2", {"TENSOR_PARALLEL_SIZE": "2"})


def test_two_worker_processes_share_a_sqlite_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    log = tmp_path / "servers.jsonl"
    config = {"storage": url, "study": "two-workers", "n_trials": 16, "log": str(log)}
    specs = worker_specs([("0",), ("1",)], tmp_path / "logs")
    outcomes = run_workers(config, specs, target=workers_standin.toy_worker)
    assert [o.ok for o in outcomes] == [True, True], [o.error for o in outcomes]
    assert all(o.stop_reason == "n_trials" for o in outcomes)

    lines = [json.loads(line) for line in log.read_text().splitlines()]
    runs = collections.Counter(line["number"] for line in lines)
    study = optuna.load_study(study_name="two-workers", storage=url)
    numbers = [t.number for t in study.trials]
    # no trial run twice, none lost: every Optuna trial evaluated once and complete
    assert all(count == 1 for count in runs.values()), runs
    assert sorted(runs) == numbers == list(range(len(numbers)))
    assert 16 <= len(numbers) <= 17  # two workers asking at once may add one
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert sum(o.trials_run for o in outcomes) == len(numbers)
    # each worker's servers saw their own GPU and CPU core, and both workers ran trials
    for spec in specs:
        seen = [line for line in lines if line["worker"] == spec.index]
        assert seen, f"worker {spec.index} ran no trial"
        assert {line["cuda_visible_devices"] for line in seen} == {spec.gpus[0]}
        assert {line["cpu_bind"] for line in seen} == {spec.cpus}
        assert len({line["worker_pid"] for line in seen}) == 1
    assert {line["worker_pid"] for line in lines} != {os.getpid()}
    assert all(line["token"] == line["expected_token"] for line in lines)
    # our table agrees with Optuna, and each trial records the GPU it held
    records = TrialStore(url).records("two-workers")
    assert [r.number for r in records] == numbers
    assert all(r.state == "complete" for r in records)
    by_number = {line["number"]: line for line in lines}
    for record in records:
        assert record.pid == by_number[record.number]["worker_pid"]


def test_a_failing_worker_is_reported(tmp_path: Path) -> None:
    specs = worker_specs([("0",), ("1",)])
    outcomes = run_workers({}, specs, target=workers_standin.failing_worker)
    assert outcomes[0].ok and outcomes[0].stop_reason == "n_trials"
    assert not outcomes[1].ok
    assert outcomes[1].error == "worker 1 cannot go on"
    assert outcomes[1].exitcode == 1


def test_status_shows_the_gpu_of_a_running_trial(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    seen: list[list[str]] = []

    def evaluate(params, context):
        context.set_device({"devices": "stand-in", "gpus": "2,3", "cpus": "1"})
        seen.append(running_devices(study_status(url, "gpu-status")))
        return Measurement(tps=toy.tps(params), ppl=toy.ppl(params))

    run_study(
        toy.SPACE, evaluate, StudyOptions(study_name="gpu-status", storage=url, n_trials=1, gate=PplGate(cap=toy.CAP))
    )
    record = TrialStore(url).record("gpu-status", 0)
    assert seen == [[f"  running: trial 0 on {record.host} (pid {os.getpid()}): GPU 2,3, CPU cores 1"]]
    assert running_devices(study_status(url, "gpu-status")) == []  # none running any more


def test_worker_spec_validates_itself() -> None:
    with pytest.raises(ValueError, match="WorkerSpec.gpus"):
        WorkerSpec(index=0, gpus=())


def _run(args: list[str], cwd: Path):
    import subprocess

    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run(
        [sys.executable, "-m", "sweeper", "run", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_gpus_that_do_not_split_are_refused_before_anything_runs(demo, tmp_path: Path) -> None:
    manifest = json.loads(demo.manifest.read_text())
    manifest["env"]["TENSOR_PARALLEL_SIZE"] = "2"
    for part in ("model", "drafter"):
        (tmp_path / part).symlink_to(getattr(demo, part))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    storage = tmp_path / "study.db"
    result = _run(
        [
            "--manifest",
            "manifest.json",
            "--space",
            "tiny-cpu",
            "--prompts",
            str(demo.prompts_tuning),
            "--ppl-data",
            str(demo.ppl_tuning),
            "--storage",
            str(storage),
            "--gpus",
            "0,1,2",
        ],
        tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --gpus 0,1,2: 3 GPU(s) do not split into groups of TENSOR_PARALLEL_SIZE=2"
    )
    assert not storage.exists()
    bad = _run(["--gpus", "0,0", "--storage", str(storage)], tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == "error: --gpus '0,0': GPU 0 listed twice"


def test_ctrl_c_reaches_every_worker_once_and_each_marks_its_trial(tmp_path: Path, capfd) -> None:
    import signal
    import threading

    url = f"sqlite:///{tmp_path / 'study.db'}"
    log = tmp_path / "servers.jsonl"
    # a trial sleeps 1.5 s after its line: the Ctrl-C comes at most a poll (0.3 s) and the timer
    # (0.1 s) after the sixth line, so that line's worker is still in its trial. With 0.3 s, on a
    # loaded 2-core machine both workers were at times between trials, and none had one to mark.
    config = {"storage": url, "study": "ctrl-c", "n_trials": 200, "log": str(log), "sleep": 1.5}
    polls: list[int] = []
    sent: list[bool] = []

    def while_running() -> None:
        polls.append(len(log.read_text().splitlines()) if log.exists() else 0)
        if polls[-1] >= 6 and not sent:  # once, mid-run: Ctrl-C reaches this process only
            sent.append(True)
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()

    outcomes = run_workers(
        config,
        worker_specs([("0",), ("1",)]),
        target=workers_standin.toy_worker,
        while_running=while_running,
        poll_s=0.3,
    )
    assert [o.stop_reason for o in outcomes] == ["interrupted", "interrupted"], outcomes
    assert all(o.ok for o in outcomes)
    study = optuna.load_study(study_name="ctrl-c", storage=url)
    states = collections.Counter(t.state.name for t in study.trials)
    assert states["RUNNING"] == 0  # each worker marked the trial it was running
    records = TrialStore(url).records("ctrl-c")
    interrupted = [r for r in records if r.state == "interrupted"]
    assert 1 <= len(interrupted) <= 2 and len(records) < 50
    assert sent
    warnings = capfd.readouterr().err
    assert warnings.count("SIGINT: stopping after marking the running trial") == 2
    assert "SIGINT again" not in warnings


def test_prepare_gives_the_evaluator_its_device_slot(tmp_path: Path) -> None:
    plain = prepare(RunPlan(storage=str(tmp_path / "a.db"), run_dir=str(tmp_path)))
    assert plain.evaluator.device.server_env() == {}  # no --gpus: the manifest decides
    one = prepare(RunPlan(storage=str(tmp_path / "b.db"), run_dir=str(tmp_path), gpus="1"))
    assert one.evaluator.device.server_env()["CUDA_VISIBLE_DEVICES"] == "1"
    assert one.evaluator.device.describe()["gpus"] == "1"


def test_the_parent_reports_the_confirmed_best_not_the_fastest_figure(synthetic, tmp_path: Path, caplog) -> None:
    from search_spaces import load_preset
    from sweeper.demo import demo_paths
    from sweeper.manifest import Manifest

    # 5 speculative tokens read 189 tok/s against the base's 179 in every server: within the
    # noise assumed (10 %), so after its round the race is a tie, and a tie keeps the base
    url = f"sqlite:///{tmp_path / 'tie.db'}"
    space = load_preset("tiny-cpu").bind(Manifest.load(demo_paths().manifest).env)
    contender = {"sliding_window": 32, "centroid_top_k": 8, "num_speculative_tokens": 5}
    run_study(
        space,
        synthetic.synthetic_evaluator(),
        StudyOptions(
            study_name="tie",
            storage=url,
            n_trials=2,
            gate=PplGate(cap=2.35),
            sampler="random",
            seed=0,
            enqueue=[contender],
            enqueue_space_configs=False,
            confirm=ConfirmSettings(rounds=1),
            enqueue_base=True,
            handle_signals=False,
        ),
    )
    status = study_status(url, "tie")
    now = standing(status.trials, ConfirmSettings(rounds=1))
    assert dict(status.best.params) == contender and status.best.tps == 189.0
    assert now.incumbent.is_base and now.confirmed
    with caplog.at_level("INFO", logger="sweeper.sweep._workers"):
        _report(url, "tie")
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("study tie:")]
    assert line.endswith(f"best {now.incumbent.describe()} at {now.tps_interval(now.incumbent).value:.1f} tok/s")
    assert f"trial {now.incumbent.first} " in line and now.incumbent.first != status.best.number
