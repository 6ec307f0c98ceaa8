"""Warm starts: servers forked from a long-lived process that has imported vLLM once.

A fresh server spends most of its start importing Python (vLLM, torch,
transformers) before it touches the model. ``WarmLaunchers`` keeps one
launcher process (``warm_launcher.py``) per interpreter and start-time
environment, with those modules imported and no CUDA context or thread pool
started; each server is then forked from it and runs the serve command in
the child, with the trial's whole environment, folder and arguments applied
before anything of the command reads them (see ``warm_launcher``).

``warm_plan`` decides whether a serve command can start warm:

* ``sweeper serve ...``, ``python -m MODULE ...`` and ``python SCRIPT ...``
  run in the forked child as ``__main__``; an ``os.exec*`` of the same
  interpreter into ``-m MODULE`` inside them (``sweeper serve`` does it; a
  thin ``serve.py`` may) runs in place too;
* anything else (a shell script, a binary, interpreter options) starts
  fresh, and the plan says why.

The environment read while Python and vLLM start (``STARTUP_PREFIXES``:
``LD_*``, ``PYTHON*``, ``MALLOC_*``, ``CUDA_*``, ``VLLM_*``, the thread
pools', torch's and Hugging Face's variables) keys the launcher: a server
whose values differ gets another launcher. Everything else is set in the
child only. ``verify`` and ``rerun`` never start warm: the organizers start
fresh servers, and so do they.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ServerStartError
from sweeper.serving import processes
from sweeper.serving.warm_child import STARTUP_PREFIXES, startup_key

logger = logging.getLogger(__name__)

# imported once by each launcher (a module the installed vLLM lacks is skipped)
WARM_MODULES = (
    "torch",
    "transformers",
    "vllm",
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.abstract",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.cpu_worker",
    "vllm.v1.worker.cpu_model_runner",
    "vllm.model_executor.models.gemma4",
    "vllm.model_executor.models.gemma4_mtp",
    "vllm.v1.spec_decode.gemma4",
    "sweeper.cli",
)
# run by its path, so that an interpreter without sweeper installed (a --server-venv) can run it too
LAUNCHER_FILE = Path(__file__).with_name("warm_launcher.py")
# a variable that only makes a launcher's environment block larger: a forked child writes the
# environment it was given into that block, where the kernel's view of it (/proc/<pid>/environ) is read,
# and a server's or its engine's environment is larger than the launcher's
ENVIRONMENT_ROOM = ("SWEEPER_ENVIRONMENT_ROOM", "." * 32768)
READY_TIMEOUT_S = 600.0
REPLY_TIMEOUT_S = 60.0


class WarmStarts(str, enum.Enum):
    """Which of a study's servers start from a warm launcher (verify and rerun: always fresh)."""

    OFF = "off"  # every server fresh (--fresh-servers)
    # the searched trials warm; the servers whose readings a claim rests on (the base manifest's own
    # trial, the race servers) fresh
    SEARCH = "search"
    ALL = "all"  # every server of the study warm, race servers included


# the default follows the proof that a warm server measures what a fresh one does: it was not shown, on
# CPU (30 pairs on 2026-12-07: warm / fresh 0.938, 95 % 0.906-0.970) nor on an H100 (9 pairs on 2026-12-07:
# 1.022, 0.934-1.119), so no claim rests on a warm server (benchmarks/warm_start.py; docs/measurement.md,
# "Warm starts against fresh ones")
DEFAULT_WARM_STARTS = WarmStarts.SEARCH


@dataclasses.dataclass(frozen=True)
class WarmPlan:
    """Whether a serve command starts warm, with which interpreter, or why not."""

    python: str | None
    reason: str

    @property
    def warm(self) -> bool:
        return self.python is not None


def _is_python(path: str) -> bool:
    return Path(path).name.startswith("python")


def warm_plan(command: Sequence[str]) -> WarmPlan:
    """Can ``command`` (a resolved serve command) run in a child forked from a warm launcher?"""
    if len(command) < 2 or not _is_python(command[0]):
        return WarmPlan(None, f"the serve command starts with {Path(command[0]).name!r}, not a Python interpreter")
    second = command[1]
    if second == "-m":
        if len(command) < 3:
            return WarmPlan(None, "the serve command names no module after -m")
        return WarmPlan(command[0], f"runs module {command[2]} in a warm child")
    if second.startswith("-"):
        return WarmPlan(None, f"the serve command passes the interpreter option {second!r}")
    return WarmPlan(command[0], f"runs script {Path(second).name} in a warm child")


def startup_environment(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` read while a server's interpreter starts: a launcher's key."""
    return startup_key(env)


class LaunchedProcess:
    """A server forked by a launcher, with the part of ``subprocess.Popen`` that ServerProcess uses."""

    def __init__(self, launcher: WarmLauncher, pid: int) -> None:
        self._launcher = launcher
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode


class WarmLauncher:
    """One launcher process: its interpreter and start-time environment, its children's exits."""

    def __init__(
        self, python: str, environment: Mapping[str, str], *, log_path: Path, modules: Sequence[str] = WARM_MODULES
    ) -> None:
        self.python = python
        self.log_path = log_path
        self._exits: dict[int, int] = {}
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._next_id = 0
        self.ready_info: dict[str, Any] = {}
        began = time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        setup = processes.ChildSetup(log_path.with_name(log_path.name + ".pdeathsig"), processes.SIGKILL)
        with open(log_path, "ab") as log:
            try:
                self.process = subprocess.Popen(  # noqa: S603 - our own launcher module
                    [python, str(LAUNCHER_FILE), *modules],
                    cwd=str(log_path.parent),
                    env={**environment, ENVIRONMENT_ROOM[0]: ENVIRONMENT_ROOM[1]},
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    preexec_fn=setup,  # noqa: PLW1509 - setsid + pdeathsig only
                )
            except OSError as exc:
                raise ServerStartError(f"cannot start the warm launcher with {python!r}: {exc}") from exc
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        if not first:
            self.process.wait(timeout=10)
            raise ServerStartError(
                f"the warm launcher of {python} ended at its start (exit {self.process.returncode}); "
                f"log: {log_path}:\n{processes.read_tail(log_path, 20)}"
            )
        self.ready_info = json.loads(first)
        self.started_s = time.monotonic() - began
        if self.ready_info.get("threads", 1) > 1:
            self.close()
            raise ServerStartError(
                f"the warm launcher of {python} cannot fork servers safely: its imports started threads"
            )
        self._reader = threading.Thread(target=self._read, name="warm-launcher-reader", daemon=True)
        self._reader.start()
        logger.info(
            "warm launcher pid %d ready in %.1f s (%d modules imported, %d thread(s))",
            self.process.pid,
            self.started_s,
            len(self.ready_info.get("imported", [])),
            self.ready_info.get("threads", 0),
        )

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            with self._cond:
                if "exited" in message:
                    self._exits[int(message["exited"])] = int(message["code"])
                elif "id" in message:
                    self._replies[int(message["id"])] = message
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def alive(self) -> bool:
        return self.process.poll() is None

    def launch(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        death_signal: int,
    ) -> LaunchedProcess:
        """Fork a server that runs ``argv`` (its ``[0]`` this launcher's interpreter)."""
        assert self.process.stdin is not None
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
        request = {
            "id": request_id,
            "argv": list(argv),
            "env": dict(env),
            # absolute: the child opens its log before it moves to its folder, in the launcher's folder
            "cwd": str(Path(cwd).resolve()),
            "log": str(Path(log_path).resolve()),
            "death_signal": int(death_signal),
        }
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except OSError as exc:
            raise ServerStartError(f"the warm launcher (pid {self.process.pid}) is gone: {exc}") from exc
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        with self._cond:
            while request_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    raise ServerStartError(f"the warm launcher (pid {self.process.pid}) did not fork the server")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(request_id)
        if "pid" not in reply:
            raise ServerStartError(f"the warm launcher could not start the server: {reply.get('error')}")
        return LaunchedProcess(self, int(reply["pid"]))

    def exit_code(self, pid: int) -> int | None:
        """The exit code of a child that ended, None while it runs."""
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
        if not self.alive() and not processes.group_members(pid) and not Path(f"/proc/{pid}").exists():
            return -9  # the launcher died before it could report the exit
        return None

    def close(self, timeout_s: float = 10.0) -> None:
        """End the launcher (its stdin closed; SIGKILL if it lingers)."""
        if self.process.poll() is not None:
            return
        try:
            assert self.process.stdin is not None
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout_s)


class WarmLaunchers:
    """The launchers of this sweeper process, one per (interpreter, start-time environment).

    A launcher that died is replaced at the next launch. All end with
    ``close()``, at this process's exit, and (through their parent-death
    signal) when this process is killed.
    """

    def __init__(self, log_folder: Path | None = None, *, modules: Sequence[str] = WARM_MODULES) -> None:
        self.log_folder = log_folder
        self.modules = tuple(modules)  # what each launcher imports before it forks
        self._launchers: dict[tuple[str, tuple[tuple[str, str], ...]], WarmLauncher] = {}
        self._lock = threading.Lock()
        self._failed: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}  # not tried again
        atexit.register(self.close)

    def launcher_for(self, python: str, env: Mapping[str, str]) -> WarmLauncher:
        """The launcher for a server of ``python`` with ``env``: started (and waited for) if new."""
        key = (python, startup_environment(env))
        with self._lock:
            if key in self._failed:
                raise ServerStartError(self._failed[key])
            launcher = self._launchers.get(key)
            if launcher is not None and launcher.alive():
                return launcher
            if launcher is not None:
                logger.warning("warm launcher pid %d had ended: starting another", launcher.process.pid)
            # the environment this sweeper has, with the start-time part of the server's
            environment = {k: v for k, v in env.items() if k in os.environ or k.startswith(STARTUP_PREFIXES)}
            folder = self.log_folder or Path(os.environ.get("TMPDIR", "/tmp"))
            log_path = folder / f"sweeper-warm-launcher-{os.getpid()}-{len(self._launchers) + 1}.log"
            if self._launchers:
                logger.info(
                    "another warm launcher: this server's start-time environment differs (%s)",
                    ", ".join(sorted({k for k, _ in key[1]} ^ {k for k, _ in next(iter(self._launchers))[1]}))
                    or "values",
                )
            try:
                launcher = WarmLauncher(python, environment, log_path=log_path, modules=self.modules)
            except ServerStartError as exc:
                self._failed[key] = str(exc)
                raise
            self._launchers[key] = launcher
            return launcher

    def pids(self) -> list[int]:
        with self._lock:
            return [launcher.process.pid for launcher in self._launchers.values() if launcher.alive()]

    def close(self) -> None:
        with self._lock:
            launchers, self._launchers = list(self._launchers.values()), {}
        for launcher in launchers:
            launcher.close()


_shared: WarmLaunchers | None = None


def shared_launchers() -> WarmLaunchers:
    """This process's launchers (one set per sweeper process, so per study worker)."""
    global _shared
    if _shared is None:
        _shared = WarmLaunchers()
    return _shared
