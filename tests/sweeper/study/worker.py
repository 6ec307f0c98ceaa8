"""A sweeper worker in its own process, for the tests that kill or signal one.

    python worker.py '{"storage": URL, "study": NAME, "n_trials": N, "log": PATH,
                       "hang_on": [trial numbers], "sleep": seconds, "seed": S,
                       "server": "sleep" | "fake"}'

Its evaluator measures the toy landscape. On a trial listed in ``hang_on``
it starts a stand-in server (``sleep``, carrying SWEEPER_SERVER_TOKEN in its
environment, in a session of its own like a real server), reports the token
through the context, writes ``hanging-N`` and waits; the ``finally`` stops
that server and writes ``cleanup-N`` (what a real evaluator's server
context manager does). With ``"server": "fake"`` the stand-in is a real
``ServerProcess`` (so with its parent-death signal) running
``tests/sweeper/serving/fake_server.py`` in its ``escape`` mode: the server
itself dies with the worker, the child it started in a session of its own
does not, and carries the token. Every evaluation is logged as a JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import toy  # noqa: E402

import sweeper  # noqa: E402
from sweeper.study import Measurement, PplGate, StudyOptions  # noqa: E402


def hang_in_fake_server(context, folder: Path) -> None:
    from sweeper.manifest import Manifest
    from sweeper.serving import ServerProcess

    script = Path(__file__).resolve().parents[1] / "serving" / "fake_server.py"
    manifest = Manifest.from_dict(
        {
            "name": "fake",
            "serve": ["python", str(script)],
            "env": {"FAKE_MODE": "escape", "FAKE_STATE_DIR": str(folder)},
        },
        source=folder / "manifest.json",
    )
    with ServerProcess(manifest, ready_timeout_s=60, log_path=folder / "fake.log") as server:
        context.set_server_token(server.token)
        (folder / f"server-{context.number}").write_text(str(server.pid))
        (folder / f"hanging-{context.number}").write_text(str(os.getpid()))
        time.sleep(300)


def main() -> None:
    config = json.loads(sys.argv[1])
    log = Path(config["log"])

    def evaluate(params, context):
        with log.open("a") as out:
            out.write(json.dumps({"number": context.number, "pid": os.getpid(), "params": params}) + "\n")
        if context.number in config.get("hang_on", []) and config.get("server") == "fake":
            hang_in_fake_server(context, log.parent)
        if context.number in config.get("hang_on", []):
            token = f"token-{context.number}-{os.getpid()}"
            server = subprocess.Popen(
                ["sleep", "300"],
                env={**os.environ, "SWEEPER_SERVER_TOKEN": token},
                start_new_session=True,
            )
            context.set_server_token(token)
            (log.parent / f"server-{context.number}").write_text(str(server.pid))
            try:
                (log.parent / f"hanging-{context.number}").write_text(str(os.getpid()))
                time.sleep(300)
            finally:
                server.terminate()
                server.wait()
                (log.parent / f"cleanup-{context.number}").write_text("done")
        time.sleep(config.get("sleep", 0.0))
        return Measurement(tps=toy.tps(params), ppl=toy.ppl(params))

    result = sweeper.run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name=config["study"],
            storage=config["storage"],
            n_trials=config["n_trials"],
            gate=PplGate(cap=toy.CAP),
            sampler=config.get("sampler", "random"),
            seed=config.get("seed"),
        ),
    )
    print(json.dumps({"stop_reason": result.stop_reason, "trials_run": result.trials_run}))


if __name__ == "__main__":
    main()
