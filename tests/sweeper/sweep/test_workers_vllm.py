"""`sweeper run --gpus 0,1` with real vLLM on the tiny model: two workers on one SQLite
study on a CPU machine, each worker's servers on their own CUDA_VISIBLE_DEVICES and core.

The manifest is the demo's with one change: its serve command first prints
the server's CUDA_VISIBLE_DEVICES and VLLM_CPU_OMP_THREADS_BIND into the
server log, then runs `sweeper serve` as the demo does. vLLM itself logs
the core binding it applied, so the log shows what the server really got.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from storage import TrialStore
from sweeper.demo import DemoPaths
from sweeper.serving import TOKEN_VARIABLE
from sweeper.serving.processes import pids_with_variable
from sweeper.sweep._workers import cpu_shares

pytestmark = pytest.mark.server

STUDY = "two-gpus"
TRIALS = 4
ECHO = re.compile(r"^sweeper-test: CUDA_VISIBLE_DEVICES=(\S*) VLLM_CPU_OMP_THREADS_BIND=(\S*)$", re.M)


def echoing_manifest(folder: Path, demo: DemoPaths) -> Path:
    for part in ("model", "drafter"):
        (folder / part).symlink_to(getattr(demo, part))
    manifest = json.loads(demo.manifest.read_text())
    path = folder / "manifest.json"
    manifest["name"] = "tiny-two-gpus"
    manifest["serve"] = [
        "sh",
        "-c",
        'echo "sweeper-test: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES '
        'VLLM_CPU_OMP_THREADS_BIND=$VLLM_CPU_OMP_THREADS_BIND"; exec "$0" -m sweeper serve "$1"',
        sys.executable,
        str(path),
    ]
    path.write_text(json.dumps(manifest))
    return path


def test_two_workers_on_two_gpus_share_one_study(tmp_path: Path, demo: DemoPaths) -> None:
    manifest = echoing_manifest(tmp_path, demo)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    runs = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "sweeper",
        "run",
        "--manifest",
        str(manifest),
        "--space",
        "tiny-cpu",
        "--prompts",
        str(demo.prompts_tuning),
        "--ppl-data",
        str(demo.ppl_tuning),
        "--study",
        STUDY,
        "--storage",
        url,
        "--run-dir",
        str(runs),
        "--n-trials",
        str(TRIALS),
        "--ppl-cap",
        "100",
        "--num-prompts",
        "2",
        "--output-len",
        "16",
        "--warmup-requests",
        "0",
        "--warmup-prompts",
        "2",
        "--confirm-rounds",
        "0",  # this test counts the budget's trials: no races
        "--gpus",
        "0,1",
        "--json",
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["stop_reason"] == "n_trials"

    study = optuna.load_study(study_name=STUDY, storage=url)
    numbers = [t.number for t in study.trials]
    assert TRIALS <= len(numbers) <= TRIALS + 1
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    records = TrialStore(url).records(STUDY)
    assert [r.number for r in records] == numbers and all(r.state == "complete" for r in records)

    cores = cpu_shares(2)
    expected = {"0": cores[0], "1": cores[1]}
    by_worker: dict[int, set[str]] = {}
    for record in records:
        log = (runs / STUDY / f"trial-{record.number:04d}" / "server.log").read_text()
        seen = ECHO.findall(log)
        assert len(seen) == 1, f"trial {record.number} started {len(seen)} servers"  # run once
        gpu, bind = seen[0]
        assert bind == expected[gpu]
        if bind:  # vLLM's own account of the binding it applied
            assert f"VLLM_CPU_OMP_THREADS_BIND={bind!r}" in log
        assert record.extras["gpus"] == gpu
        assert record.extras.get("cpus") == (bind or None)
        assert record.tps and record.tps > 0 and record.ppl and record.ppl > 1
        by_worker.setdefault(record.pid, set()).add(gpu)
    # two worker processes (not this one, not the parent), each always on its own GPU
    assert len(by_worker) == 2 and os.getpid() not in by_worker
    assert sorted(gpu for gpus in by_worker.values() for gpu in gpus) == ["0", "1"]
    tokens = {r.server_token for r in records}
    assert not [pid for pid, token in pids_with_variable(TOKEN_VARIABLE).items() if token in tokens]
