"""The warm launcher's own program: import vLLM once, then fork each server from this process.

Run by ``WarmLaunchers`` (``_launcher.py``) as ``python .../warm_launcher.py
MODULE ...`` (by its path: the interpreter need not have sweeper installed). It imports the named modules
(vLLM's OpenAI server and what it loads; a module that is missing is
skipped), starts no CUDA context and no thread pool, then reads one JSON
request a line on stdin and answers one JSON line each on stdout:

* at start: ``{"ready": true, "seconds": s, "imported": [...], "import_changes": [...], "threads": n}``
  (``import_changes``: the variables its imports set, which each child takes too). With a CUDA
  build of torch it imports of vLLM only ``CUDA_VLLM_MODULES``;
* ``{"id": n, "argv": [...], "env": {...}, "cwd": "...", "log": "...", "death_signal": 15}``
  forks a child and answers ``{"id": n, "pid": pid}``. The child starts a
  session of its own, gets the parent-death signal (this launcher being its
  parent), sends its output to ``log``, takes ``env`` as its whole
  environment, moves to ``cwd`` and runs ``argv`` as a fresh interpreter
  would: ``[python, "-m", MODULE, ...]`` with the module as ``__main__``,
  ``[python, SCRIPT, ...]`` with the script as ``__main__``. An ``os.exec*``
  of this same interpreter into ``-m MODULE`` (``sweeper serve`` does
  that, and so does a thin ``serve.py``) is run in the same process
  instead of a new interpreter; any other exec happens as usual;
* when a child ends: ``{"exited": pid, "code": c}`` (a signal is ``-signum``).

The launcher ends when its stdin closes (sweeper ended) and dies with its
parent (``PR_SET_PDEATHSIG``, set by the parent before the exec); its
children then get their own death signal. This module imports nothing of
sweeper at its top but its sibling ``warm_child.py`` (what a forked child
becomes, which imports nothing of sweeper either), so that what the child
runs is loaded as it would be fresh, apart from the modules named on the
command line.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported as sweeper.serving.warm_launcher
    from sweeper.serving import warm_child
else:  # run by its path: its folder is still sys.path[0] here (dropped before main, at the end)
    import warm_child

_modules: list[str] = []  # what a launcher imports (one it starts for another environment imports the same)


def _send(message: dict[str, Any]) -> None:
    out = sys.__stdout__
    assert out is not None  # the launcher's stdout is its pipe to sweeper
    out.write(json.dumps(message) + "\n")
    out.flush()


def _flush_output() -> None:
    """Flush what is buffered before a fork, so that no child writes it a second time."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        if stream is not None:
            stream.flush()


def _fork(request: dict[str, Any]) -> dict[str, Any]:
    _flush_output()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"id": request.get("id"), "error": f"fork failed: {exc}"}
    if pid == 0:  # the child never returns from here
        warm_child.become_server(request)
    return {"id": request.get("id"), "pid": pid}


def _reap(children: dict[int, socket.socket | None]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.pop(pid)
            continue
        if done:
            connection = children.pop(pid)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            if connection is None:
                _send({"exited": pid, "code": code})
            else:  # a spawned process: its parent reads the code where it read the pid
                try:
                    connection.sendall(struct.pack("!q", code))
                except OSError:
                    pass
                connection.close()


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    header, fds, _, _ = socket.recv_fds(connection, warm_child.HEADER.size, 64)
    if len(header) < warm_child.HEADER.size:
        raise EOFError("the requesting process closed the connection")
    (size,) = warm_child.HEADER.unpack(header)
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError("the requesting process closed the connection")
        data += chunk
    return json.loads(data), list(fds)


class _Sublaunchers:
    """The launchers this launcher starts, one per other start-time environment its servers spawn with
    (vLLM's command line sets the engine's start method; on CPU vLLM also sets the engine's and the
    workers' OpenMP and loader variables before it spawns them)."""

    def __init__(self) -> None:
        # each launcher, with its address once it has said it is ready
        self.running: dict[tuple[tuple[str, str], ...], tuple[subprocess.Popen[bytes], str | None]] = {}

    def start(self, env: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """Start the launcher for ``env``'s start-time environment, without waiting for it; its key."""
        key = warm_child.startup_key(env)
        if key == warm_child.launcher.own_key or (key in self.running and self.running[key][0].poll() is None):
            return key
        # this launcher's own environment with the requested start-time part: no server's token or settings
        own = {k: v for k, v in os.environ.items() if not k.startswith(warm_child.STARTUP_PREFIXES)}
        process = subprocess.Popen(  # noqa: S603 - this same program
            [sys.executable, os.path.abspath(__file__), "--spawned-by-launcher", *_modules],
            env={**own, **dict(key)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - pdeathsig only
        )
        print(
            f"sweeper warm launcher: pid {process.pid} serves another start-time environment "
            f"({', '.join(sorted({k for k, _ in key} ^ {k for k, _ in warm_child.launcher.own_key}) or 'values')})",
            file=sys.stderr,
        )
        self.running[key] = (process, None)
        return key

    def address(self, env: dict[str, str]) -> str:
        """The socket of the launcher for ``env``'s start-time environment: started, and waited for."""
        key = self.start(env)
        if key == warm_child.launcher.own_key:  # this launcher's own environment: its own socket
            assert warm_child.launcher.spawn_address is not None  # set before it answers any request
            return warm_child.launcher.spawn_address
        process, address = self.running[key]
        if address is not None:
            return address
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            del self.running[key]
            raise OSError(f"the launcher for another start-time environment ended at its start ({process.wait()})")
        address = str(json.loads(line)["address"])
        self.running[key] = (process, address)
        return address


def _engine_environment() -> dict[str, str] | None:
    """The environment vLLM's API server will spawn its engine with, where that is known: with a CUDA
    build, this launcher's own once vLLM is imported (what the imports set, each server takes too) and
    the start method vLLM's command line sets. None elsewhere (on CPU vLLM sets more, per engine)."""
    if not _cuda_build() or "vllm.entrypoints.openai.api_server" not in sys.modules:
        return None
    return {**os.environ, "VLLM_WORKER_MULTIPROC_METHOD": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "spawn")}


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(warm_child.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _answer(connection: socket.socket, children: dict[int, socket.socket | None], sublaunchers: _Sublaunchers) -> None:
    """One request on the launcher's socket: an address for another environment, or a spawn to fork."""
    try:
        request, fds = _receive(connection)
    except (OSError, EOFError, ValueError) as exc:
        print(f"sweeper warm launcher: a request failed: {exc}", file=sys.stderr)
        connection.close()
        return
    if request.get("op") == "address":
        try:
            reply = {"address": sublaunchers.address(request["env"])}
        except OSError as exc:
            reply = {"error": str(exc)}
        try:
            connection.sendall((json.dumps(reply) + "\n").encode())
        except OSError:
            pass
        connection.close()
        return
    _flush_output()
    pid = os.fork()
    if pid == 0:
        warm_child.become_spawned(request, fds)
    for fd in fds:
        os.close(fd)
    children[pid] = connection
    try:
        connection.sendall(struct.pack("!q", pid))
    except OSError as exc:  # the spawning process is gone; the child finds its pipe closed and ends
        print(f"sweeper warm launcher: spawned pid {pid} has no parent to tell: {exc}", file=sys.stderr)


def _hide_unloadable() -> None:
    try:  # as sweeper serve's server module does first: packages installed but unloadable are hidden
        from sweeper.serving.vllm_main import hide_unloadable
    except ImportError:
        pass
    else:
        hide_unloadable()


def _import(modules: list[str]) -> list[str]:
    imported = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module another vLLM lacks is skipped, and said
            print(f"sweeper warm launcher: not imported {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        else:
            imported.append(name)
    return imported


# what a CUDA build's launcher imports of vLLM: with the engine's, worker's and model's modules imported
# here, a forked engine failed in the sampler's Triton kernel on an H100; with these only, 12 pairs matched
# fresh servers (2026-12-07, docs/gpu.md)
CUDA_VLLM_MODULES = ("vllm", "vllm.entrypoints.openai.api_server")


def _for_this_build(modules: list[str]) -> list[str]:
    """``modules`` less, with a CUDA build of torch, vLLM's modules other than ``CUDA_VLLM_MODULES``
    (torch, where named, is imported here to tell)."""
    if "torch" not in modules:
        return modules
    try:
        importlib.import_module("torch")
    except Exception:  # noqa: BLE001 - not imported: _import says why
        return modules
    if not _cuda_build():
        return modules
    return [m for m in modules if not (m == "vllm" or m.startswith("vllm.")) or m in CUDA_VLLM_MODULES]


def _cuda_build() -> bool:
    """Is the torch this launcher imported built for CUDA (a GPU host)?"""
    torch = sys.modules.get("torch")
    return torch is not None and getattr(getattr(torch, "version", None), "cuda", None) is not None


def main(arguments: list[str]) -> None:
    """Import, then fork on request until stdin closes (or, for a launcher another launcher started
    with ``--spawned-by-launcher``, until that launcher dies)."""
    global _modules
    began = time.monotonic()
    sublaunched = arguments[:1] == ["--spawned-by-launcher"]
    _modules = arguments[1:] if sublaunched else arguments
    before_imports = dict(os.environ)
    warm_child.launcher.own_key = warm_child.startup_key(before_imports)
    _hide_unloadable()
    _modules = _for_this_build(_modules)
    imported = _import(_modules)
    warm_child.launcher.import_changes = warm_child.environment_changes(before_imports, os.environ)
    warm_child.launcher.logging_state = warm_child.LoggingState()
    os_threads = len(os.listdir(f"/proc/{os.getpid()}/task"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address = f"\0sweeper-warm-launcher-{os.getpid()}-{os.urandom(6).hex()}"
    warm_child.launcher.spawn_address = address
    listener.bind(address)
    listener.listen(16)
    sublaunchers = _Sublaunchers()
    engine_environment = None if sublaunched else _engine_environment()
    if engine_environment is not None:  # its launcher's imports run while the first server starts
        sublaunchers.start(engine_environment)
    _send(
        {
            "ready": True,
            "address": address,
            "seconds": round(time.monotonic() - began, 3),
            "imported": imported,
            "import_changes": sorted(warm_child.launcher.import_changes),
            "threads": threading.active_count(),
            "os_threads": os_threads,
        }
    )
    children: dict[int, socket.socket | None] = {}
    stdin = None if sublaunched else sys.stdin.buffer
    watched: list[Any] = [listener] if stdin is None else [stdin, listener]
    pending = b""
    while True:
        try:
            readable, _, _ = select.select(watched, [], [], 0.2)
        except InterruptedError:
            readable = []
        _reap(children)
        if listener in readable:
            connection, _ = listener.accept()
            _answer(connection, children, sublaunchers)
        if stdin is None or stdin not in readable:
            continue
        chunk = os.read(stdin.fileno(), 65536)
        if not chunk:  # sweeper closed the pipe: it is done, or gone
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if not line.strip():
                continue
            answer = _fork(json.loads(line))
            if "pid" in answer:
                children[answer["pid"]] = None
            _send(answer)
    for pid, spawn_connection in children.items():  # stdin closed with servers still running: they end with us
        if spawn_connection is not None:  # a spawned process: it ends with its server
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise


if __name__ == "__main__":
    del sys.path[0]  # this file's folder: none of its modules may shadow what the server imports
    main(sys.argv[1:])
