"""The warm launcher without vLLM: what a forked server and a process it spawns get, and when not to fork.

A plain Python script stands in for the serve command here (the launcher imports only ``json``),
so these run in a second; tests/sweeper/serving/test_warm_vllm.py runs the real vLLM server.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess, WarmLaunchers, processes, warm_child, warm_plan
from sweeper.serving.warm_child import startup_key

# the end of each stand-in server's __main__ block: answer /v1/models on HOST:PORT until stopped
ANSWER_MODELS = r"""
    class Models(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": os.environ.get("SERVED_MODEL_NAME", "x")}]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    HTTPServer((os.environ["HOST"], int(os.environ["PORT"])), Models).serve_forever()
"""

# answers /v1/models; writes what it was started with, and what a process it spawns was
SERVE = (
    r"""
import json, multiprocessing, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

def report(path):
    with open(path, "w") as out:
        json.dump({"env": dict(os.environ), "pgid": os.getpgid(0), "cwd": os.getcwd(),
                   "name": __name__, "ppid": os.getppid()}, out)

if __name__ == "__main__":
    report("server.json")
    context = multiprocessing.get_context("spawn")
    os.environ["OMP_NUM_THREADS"] = "1"  # as vLLM sets it for a worker it spawns on CPU
    child = context.Process(target=report, args=("spawned.json",))
    child.start()
    child.join(30)
    with open("spawned-exit.json", "w") as out:
        json.dump({"exitcode": child.exitcode, "argv": sys.argv, "path0": sys.path[0]}, out)
"""
    + ANSWER_MODELS
)


@pytest.fixture()
def script_manifest(tmp_path: Path) -> Manifest:
    (tmp_path / "serve.py").write_text(SERVE)
    path = tmp_path / "manifest.json"
    path.write_text(
        json.dumps(
            {
                "name": "script",
                "model_id": "m",
                "served_model_name": "m",
                "serve": ["python", "serve.py", "--flag", "value"],
                "port": 8000,
                "env": {"KNOB": "7", "VLLM_SOMETHING": "1"},
            }
        )
    )
    return Manifest.load(path)


def test_a_forked_server_and_the_process_it_spawns_get_what_a_fresh_start_gives(
    script_manifest: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launchers = WarmLaunchers(tmp_path / "launchers", modules=("json",))
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path / "runs")  # a run folder given relative, as `sweeper run` gives it
    try:
        server = ServerProcess(script_manifest, launchers=launchers, overrides={"KNOB": "8"}, log_path="trial/s.log")
        with server:
            assert server.start_kind == "warm"
            assert (tmp_path / "runs" / "trial" / "s.log").is_file()
            seen = json.loads((tmp_path / "server.json").read_text())
            spawned = json.loads((tmp_path / "spawned.json").read_text())
            ended = json.loads((tmp_path / "spawned-exit.json").read_text())
            (launcher_pid,) = launchers.pids()
            members = set(processes.group_members(server.pid))
            # the server is found by its token, as a fresh one is (the kernel's view of its environment)
            by_token = set(processes.pids_with_env("SWEEPER_SERVER_TOKEN", server.token))
        # the server: the whole environment sweeper gives a fresh one, its folder, run as __main__
        assert seen["env"]["KNOB"] == "8" and seen["env"]["VLLM_SOMETHING"] == "1"
        assert seen["env"]["PORT"] == str(server.port) and seen["env"]["SWEEPER_SERVER_TOKEN"] == server.token
        assert {
            k: v
            for k, v in seen["env"].items()
            if k not in ("PORT", "HOST", "SWEEPER_SERVER_TOKEN", "KNOB", "VLLM_SOMETHING")
        } == {
            k: v
            for k, v in os.environ.items()
            if k not in ("PORT", "HOST", "SWEEPER_SERVER_TOKEN", "KNOB", "VLLM_SOMETHING")
        }
        assert seen["cwd"] == str(tmp_path) and seen["name"] == "__main__" and seen["pgid"] == server.pid
        assert seen["ppid"] == launcher_pid
        # (argv[0] is the script's absolute path, as its __file__; a fresh interpreter keeps it as typed)
        assert ended["argv"] == [str(tmp_path / "serve.py"), "--flag", "value"] and ended["path0"] == str(tmp_path)
        # the spawned process: its parent's environment at the spawn (OMP_NUM_THREADS included), its
        # parent's group, an exit code its parent read; another start-time environment, so it was forked
        # by a second launcher started with that environment
        assert spawned["env"] == {**seen["env"], "OMP_NUM_THREADS": "1"}
        assert spawned["pgid"] == server.pid and spawned["name"] == "__mp_main__"
        assert spawned["ppid"] not in (launcher_pid, server.pid)
        assert ended["exitcode"] == 0
        assert server.pid in members and server.pid in by_token and by_token <= members
        assert processes.group_members(server.pid) == []  # stopped with its group
    finally:
        launchers.close()
    assert launchers.pids() == []


def test_which_serve_commands_start_warm() -> None:
    python = sys.executable
    assert warm_plan([python, "-m", "sweeper", "serve", "m.json"]).python == python
    assert warm_plan(["/venv/bin/python3", "serve.py"]).python == "/venv/bin/python3"
    assert warm_plan([python, "-u", "serve.py"]).reason == "the serve command passes the interpreter option '-u'"
    assert warm_plan(["/usr/bin/bash", "run.sh"]).warm is False
    assert warm_plan([python, "-m"]).warm is False


def test_the_start_time_environment_keys_a_launcher() -> None:
    env = {"LD_PRELOAD": "libx.so", "OMP_NUM_THREADS": "2", "VLLM_X": "1", "SLIDING_WINDOW": "8", "PORT": "1"}
    assert startup_key(env) == (("LD_PRELOAD", "libx.so"), ("OMP_NUM_THREADS", "2"), ("VLLM_X", "1"))
    assert startup_key({**env, "SLIDING_WINDOW": "64", "SWEEPER_SERVER_TOKEN": "t"}) == startup_key(env)
    assert startup_key({**env, "OMP_NUM_THREADS": "1"}) != startup_key(env)
    # the compile-cache folders (one per K) are read when vLLM compiles, loads or saves: one launcher
    # forks every K's server (test_warm_vllm.py checks that vLLM and Triton read them no sooner)
    cached = {**env, "VLLM_CACHE_ROOT": "/c/k1-x", "TRITON_CACHE_DIR": "/c/triton"}
    assert startup_key(cached) == startup_key({**cached, "VLLM_CACHE_ROOT": "/c/k5-x"}) == startup_key(env)


def test_a_serve_command_that_is_not_python_starts_fresh_and_says_why(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(
        json.dumps({"name": "shell", "model_id": "m", "serve": ["./serve.sh"], "port": 8000, "env": {}})
    )
    server = ServerProcess(
        Manifest.load(manifest_path), launchers=WarmLaunchers(tmp_path, modules=("json",)), log_path=tmp_path / "s.log"
    )
    server.start()
    try:
        assert server.start_kind == "fresh"
        assert server.start_note == "starts fresh: the serve command starts with 'serve.sh', not a Python interpreter"
    finally:
        server.stop()


STAND_IN_MODULES = ("torch", "json", "vllm", "vllm.engine_core", "vllm.entrypoints.openai.api_server")


def _stand_in_packages(folder: Path, *, cuda: bool) -> Path:
    """Stand-ins for what this CPU machine lacks: a torch whose version.cuda (what the launcher reads) is
    set or not, to come first on the server's PYTHONPATH, and a vllm package of three modules."""
    packages = folder / "packages"
    (packages / "torch").mkdir(parents=True)
    (packages / "torch" / "__init__.py").write_text(f"class version:\n    cuda = {'13.0' if cuda else None!r}\n")
    (packages / "vllm" / "entrypoints" / "openai").mkdir(parents=True)
    for module in ("__init__", "engine_core", "entrypoints/__init__", "entrypoints/openai/__init__"):
        (packages / "vllm" / f"{module}.py").write_text("")
    (packages / "vllm" / "entrypoints" / "openai" / "api_server.py").write_text("")
    return packages


@pytest.mark.parametrize("cuda", [False, True])
def test_a_cuda_build_forks_with_only_the_api_servers_vllm_modules(
    cuda: bool, script_manifest: Manifest, tmp_path: Path
) -> None:
    packages = _stand_in_packages(tmp_path, cuda=cuda)
    modules = STAND_IN_MODULES
    launchers = WarmLaunchers(tmp_path / "launchers", modules=modules)
    server = ServerProcess(
        script_manifest, launchers=launchers, overrides={"PYTHONPATH": str(packages)}, log_path=tmp_path / "s.log"
    )
    try:
        with server:
            assert server.start_kind == "warm"
            (launcher,) = launchers._launchers.values()
            imported = launcher.ready_info["imported"]
    finally:
        launchers.close()
    expected = [m for m in modules if not (cuda and m == "vllm.engine_core")]
    assert imported == expected


# sets the engine's start method as vLLM's command line does, then spawns a process that says who forked it
ENGINE_SPAWNING_SERVE = (
    r"""
import json, multiprocessing, os
from http.server import BaseHTTPRequestHandler, HTTPServer

def report():
    with open("engine.json", "w") as out:
        json.dump({"ppid": os.getppid(), "method": os.environ["VLLM_WORKER_MULTIPROC_METHOD"]}, out)

if __name__ == "__main__":
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    engine = multiprocessing.get_context("spawn").Process(target=report)
    engine.start()
    engine.join(30)
"""
    + ANSWER_MODELS
)


def _engine_launchers(launcher_pid: int) -> list[int]:
    """The launchers a launcher started for another start-time environment."""
    children = [int(p) for p in Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()]
    return [pid for pid in children if b"--spawned-by-launcher" in Path(f"/proc/{pid}/cmdline").read_bytes()]


@pytest.mark.parametrize("cuda", [False, True])
def test_a_cuda_builds_launcher_starts_the_engines_launcher_before_the_first_server(
    cuda: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an H100 a process's first warm server waited 20-25 s for the engine's launcher to import vLLM
    (2026-12-07); a CUDA build's launcher starts it at once, for the environment vLLM's API server gives
    its engine. Elsewhere the engine's environment is not known in advance: it starts on demand."""
    (tmp_path / "serve.py").write_text(ENGINE_SPAWNING_SERVE)
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(
        json.dumps(
            {"name": "e", "model_id": "m", "served_model_name": "m", "serve": ["python", "serve.py"], "port": 8000}
        )
    )
    monkeypatch.setenv("PYTHONPATH", str(_stand_in_packages(tmp_path, cuda=cuda)))
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    launchers = WarmLaunchers(tmp_path / "launchers", modules=STAND_IN_MODULES)
    try:
        launcher = launchers.launcher_for(sys.executable, dict(os.environ))
        before_any_server = _engine_launchers(launcher.process.pid)
        server = ServerProcess(Manifest.load(manifest_path), launchers=launchers, log_path=tmp_path / "s.log")
        with server:
            assert server.start_kind == "warm"
            engine = json.loads((tmp_path / "engine.json").read_text())
            after = _engine_launchers(launcher.process.pid)
    finally:
        launchers.close()
    assert len(before_any_server) == (1 if cuda else 0)
    # the engine was forked by the one engine launcher, the one started in advance where there was one
    assert len(after) == 1 and engine["ppid"] == after[0] and engine["method"] == "spawn"
    assert after == (before_any_server or after)


# imports a module that sets variables as it loads, as vLLM's own import does (its env_override sets
# PYTORCH_NVML_BASED_CUDA_CHECK and TORCHINDUCTOR_COMPILE_THREADS); writes the environment it then has and
# the kernel's view of it, and the same for a process it spawns
IMPORTING_SERVE = (
    r"""
import json, multiprocessing, os
import setter
from http.server import BaseHTTPRequestHandler, HTTPServer

def report(path):
    with open("/proc/self/environ", "rb") as view:
        entries = [e.decode() for e in view.read().split(b"\0") if b"=" in e]
    with open(path, "w") as out:
        json.dump({"env": dict(os.environ), "view": dict(e.split("=", 1) for e in entries)}, out)

if __name__ == "__main__":
    report(os.environ["REPORT"] + "-server.json")
    child = multiprocessing.get_context("spawn").Process(target=report, args=(os.environ["REPORT"] + "-spawned.json",))
    child.start()
    child.join(30)
"""
    + ANSWER_MODELS
)
SETTER = """
import os
os.environ["SET_BY_IMPORT"] = "1"
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
os.environ.pop("REMOVED_BY_IMPORT", None)
"""


# a thin launcher, as `sweeper serve` is: it imports nothing that sets variables, and execs the server
EXEC_INTO_IMPORTING_SERVE = r"""
import os, sys
os.execve(sys.executable, [sys.executable, "-m", "importing_serve"], dict(os.environ))
"""


@pytest.mark.parametrize("serve", ["importing_serve.py", "exec_serve.py"])
def test_a_forked_server_and_its_spawned_process_have_what_their_imports_set(
    serve: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh server's import of vLLM sets variables that the engine it spawns inherits; a forked
    server's import happened in the launcher, before the child took the request's environment. Both
    servers, and the processes they spawn, must have the same environment, and the kernel must show
    each process what a fresh one of it shows; so too where the server is exec'd by a thin launcher,
    whose environment a fresh one passes on before anything set those variables."""
    (tmp_path / "importing_serve.py").write_text(IMPORTING_SERVE)
    (tmp_path / "exec_serve.py").write_text(EXEC_INTO_IMPORTING_SERVE)
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "setter.py").write_text(SETTER)
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(
        json.dumps(
            {"name": "imports", "model_id": "m", "served_model_name": "m", "serve": ["python", serve], "port": 8000}
        )
    )
    manifest = Manifest.load(manifest_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "packages"))
    monkeypatch.setenv("REMOVED_BY_IMPORT", "x")
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "4")  # overwritten by the import, as vLLM's is
    launchers = WarmLaunchers(tmp_path / "launchers", modules=("json", "setter"))
    try:
        for kind in ("fresh", "warm"):
            server = ServerProcess(
                manifest,
                launchers=launchers if kind == "warm" else None,
                overrides={"REPORT": kind, "KNOB": "2"},
                log_path=tmp_path / f"{kind}.log",
            )
            with server:
                assert server.start_kind == kind
        (launcher,) = launchers._launchers.values()
        assert launcher.ready_info["import_changes"] == [
            "REMOVED_BY_IMPORT",
            "SET_BY_IMPORT",
            "TORCHINDUCTOR_COMPILE_THREADS",
        ]
        if serve == "exec_serve.py":  # the exec ran in the warm process: nothing of the server was fresh
            assert "importing_serve runs in this warm process" in (tmp_path / "warm.log").read_text()
    finally:
        launchers.close()

    def read(kind: str, process: str) -> dict[str, dict[str, str]]:
        report = json.loads((tmp_path / f"{kind}-{process}.json").read_text())
        # what differs between any two servers: the port sweeper chose, the token, the report's name
        return {
            part: {k: v for k, v in values.items() if k not in ("PORT", "SWEEPER_SERVER_TOKEN", "REPORT")}
            for part, values in report.items()
        }

    for process in ("server", "spawned"):
        fresh, warm = read("fresh", process), read("warm", process)
        assert fresh["env"]["SET_BY_IMPORT"] == "1" and fresh["env"]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
        assert "REMOVED_BY_IMPORT" not in fresh["env"] and fresh["env"]["KNOB"] == "2"
        assert warm == fresh
    # the kernel shows a server what it was started with, and a spawned process its parent's environment
    # then, with what the parent's imports set
    assert read("fresh", "server")["view"]["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    assert read("fresh", "spawned")["view"]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"


# execs this same interpreter into -m MODULE, as `sweeper serve` does: the launcher runs it in place
EXEC_SERVE = r"""
import os, sys
os.execv(sys.executable, [sys.executable, "-m", "exec_target", "--flag"])
"""
EXEC_TARGET = (
    r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

if __name__ == "__main__":
    with open("exec.json", "w") as out:
        json.dump({"pid": os.getpid(), "argv": sys.argv, "name": __name__, "knob": os.environ.get("KNOB")}, out)
"""
    + ANSWER_MODELS
)


def test_an_exec_of_this_interpreter_into_a_module_runs_in_the_warm_process(tmp_path: Path) -> None:
    (tmp_path / "serve.py").write_text(EXEC_SERVE)
    (tmp_path / "exec_target.py").write_text(EXEC_TARGET)
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(
        json.dumps(
            {"name": "exec", "model_id": "m", "served_model_name": "m", "serve": ["python", "serve.py"], "port": 8000}
        )
    )
    launchers = WarmLaunchers(tmp_path / "launchers", modules=("json",))
    log = tmp_path / "s.log"
    try:
        server = ServerProcess(Manifest.load(manifest_path), launchers=launchers, overrides={"KNOB": "3"}, log_path=log)
        with server:
            assert server.start_kind == "warm"
            seen = json.loads((tmp_path / "exec.json").read_text())
        # runpy gives the module's path as argv[0], as a fresh `python -m` does
        assert seen == {
            "pid": server.pid,
            "argv": [str(tmp_path / "exec_target.py"), "--flag"],
            "name": "__main__",
            "knob": "3",
        }
        assert "exec_target runs in this warm process" in log.read_text()
    finally:
        launchers.close()


def test_a_forked_child_keeps_the_device_files_a_library_in_the_launcher_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an H100, NVML (opened in the launcher by vLLM's platform probe) keeps the driver's
    /dev/nvidia* files open; a forked server that closed them got "The operating system has
    blocked the request" from NVML, and vLLM resolved other defaults (2026-12-07). No such file
    exists on CPU: /dev/null stands in for it here, the rest is the child's real clean-up."""
    monkeypatch.setattr(warm_child, "KEPT_DEVICE_FILES", ("/dev/null",))
    device = os.open("/dev/null", os.O_RDONLY)
    other = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT)
    pid = os.fork()
    if pid == 0:  # the child: clean up as a forked server does, then say which are left open
        code = 1
        try:
            warm_child._close_descriptors(keep={0, 1, 2})
            kept = {fd for fd in (device, other) if str(fd) in os.listdir("/proc/self/fd")}
            code = 0 if kept == {device} else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.close(device)
    os.close(other)
    assert os.waitstatus_to_exitcode(status) == 0
