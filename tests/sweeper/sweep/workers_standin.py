"""Stand-in worker targets for the tests of ``sweeper.sweep.run_workers`` (no vLLM).

``toy_worker(config, spec)`` is what ``run_worker`` is in a real run, with
the server replaced by a stand-in: each trial builds the worker's device
slot exactly as ``prepare`` does (``worker_slot``), starts a stand-in
server process (``sleep``-like, carrying a server token) with the slot's
env on top of the worker's, reads that process's environment back from
/proc, and logs it as one JSON line. The measurement is the toy landscape.
``failing_worker`` raises a StudyError in worker 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "study"))

import toy  # noqa: E402

from sweeper.errors import StudyError  # noqa: E402
from sweeper.serving import TOKEN_VARIABLE  # noqa: E402
from sweeper.serving.processes import environ_of  # noqa: E402
from sweeper.study import Measurement, PplGate, StudyOptions, run_study  # noqa: E402
from sweeper.sweep import worker_slot  # noqa: E402


def toy_worker(config: dict, spec) -> tuple[str, int]:
    slot = worker_slot(",".join(spec.gpus), {})
    log = Path(config["log"])

    def evaluate(params, context):
        token = uuid.uuid4().hex
        context.set_device(slot.describe())
        server = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env={**os.environ, **slot.server_env(), TOKEN_VARIABLE: token},
            start_new_session=True,
        )
        try:
            context.set_server_token(token)
            seen: dict = {}
            deadline = time.monotonic() + 5.0
            while TOKEN_VARIABLE not in seen and time.monotonic() < deadline:
                seen = environ_of(server.pid) or {}  # empty while the process is still in exec
                time.sleep(0.01)
            line = {
                "number": context.number,
                "worker": spec.index,
                "worker_pid": os.getpid(),
                "server_pid": server.pid,
                "cuda_visible_devices": seen.get("CUDA_VISIBLE_DEVICES"),
                "cpu_bind": seen.get("VLLM_CPU_OMP_THREADS_BIND"),
                "token": seen.get(TOKEN_VARIABLE),
                "expected_token": token,
            }
            with log.open("a") as out:
                out.write(json.dumps(line) + "\n")
            time.sleep(config.get("sleep", 0.05))
        finally:
            server.kill()
            server.wait()
        return Measurement(tps=toy.tps(params), ppl=toy.ppl(params))

    result = run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name=config["study"],
            storage=config["storage"],
            n_trials=config["n_trials"],
            gate=PplGate(cap=toy.CAP),
            sampler="random",
            seed=spec.index,
        ),
    )
    return result.stop_reason, result.trials_run


def failing_worker(config: dict, spec) -> tuple[str, int]:
    if spec.index == 1:
        raise StudyError(f"worker {spec.index} cannot go on")
    return "n_trials", 0
