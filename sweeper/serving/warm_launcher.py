"""The warm launcher's own program: import vLLM once, then fork each server from this process.

Run by ``WarmLaunchers`` (``_launcher.py``) as ``python .../warm_launcher.py
MODULE ...`` (by its path: the interpreter need not have sweeper installed). It imports the named modules
(vLLM's OpenAI server and what it loads; a module that is missing is
skipped), starts no CUDA context and no thread pool, then reads one JSON
request a line on stdin and answers one JSON line each on stdout:

* at start: ``{"ready": true, "seconds": s, "imported": [...], "threads": n}``, or
  ``{"ready": false, "refused": why}`` and an exit where torch is a CUDA build
  (``CUDA_REFUSAL``: a forked server resolved another engine configuration there);
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
sweeper at its top, so that what the child runs is loaded as it would be
fresh, apart from the modules named on the command line.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import importlib
import io
import json
import logging
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

_PR_SET_PDEATHSIG = 1
# environment read while a process starts (the loader, the interpreter, the OpenMP runtime, torch,
# vLLM, Hugging Face's libraries): a launcher forks only processes whose values of these are its own
STARTUP_PREFIXES = (
    "LD_",
    "PYTHON",
    "MALLOC_",
    "CUDA_",
    "VLLM_",
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOMP_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "NCCL_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
)


def startup_key(env: Any) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` that a process reads as it starts: which launcher may fork it."""
    return tuple(sorted((key, value) for key, value in env.items() if key.startswith(STARTUP_PREFIXES)))


_real_execv = os.execv
_real_execve = os.execve


def _send(message: dict[str, Any]) -> None:
    sys.__stdout__.write(json.dumps(message) + "\n")
    sys.__stdout__.flush()


def _exit_process(code: int) -> None:
    """End the child as an interpreter would at its end: exit handlers, flushed output, the code."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - nothing is left to report it to
                pass
        os._exit(code)


def _show_environment(env: dict[str, str]) -> None:
    """Write ``env`` where ``/proc/<pid>/environ`` reads it (the block the launcher was started
    with, unused once the child has replaced its environment), sweeper's own variables first.

    A forked child's environment lives elsewhere in its memory, so without this the kernel would
    show the launcher's: sweeper finds a server's processes by the token in their environment
    (``processes.pids_with_env``). What does not fit in the block is left out of the view only.
    """
    try:
        fields = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start and env_end (fields 50 and 51)
    except (OSError, IndexError, ValueError):
        return
    block = b""
    for key, value in sorted(env.items(), key=lambda item: not item[0].startswith("SWEEPER_")):
        entry = f"{key}={value}".encode() + b"\0"
        if len(block) + len(entry) > end - start:
            break
        block += entry
    ctypes.memmove(start, block.ljust(end - start, b"\0"), end - start)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


class _LoggingState:
    """The logging set-up as the imports left it, put back before a module runs as ``__main__``.

    ``sweeper serve`` configures sweeper's own log lines before it execs
    vLLM; a fresh vLLM process would not have them, so they are undone.
    """

    def __init__(self) -> None:
        root = logging.getLogger()
        self.root = (root.level, list(root.handlers), root.disabled)
        self.loggers = {
            name: (item.level, list(item.handlers), item.disabled, item.propagate)
            for name, item in logging.Logger.manager.loggerDict.items()
            if isinstance(item, logging.Logger)
        }

    def restore(self) -> None:
        root = logging.getLogger()
        root.level, root.handlers[:], root.disabled = self.root[0], self.root[1], self.root[2]
        for name, item in logging.Logger.manager.loggerDict.items():
            if not isinstance(item, logging.Logger):
                continue
            if name in self.loggers:
                item.level, handlers, item.disabled, item.propagate = self.loggers[name]
                item.handlers[:] = handlers
            else:
                item.handlers[:] = []
                item.level, item.disabled, item.propagate = logging.NOTSET, False, True


_logging_state: _LoggingState | None = None


def _same_interpreter(path: str) -> bool:
    try:
        return os.path.realpath(path) == os.path.realpath(sys.executable)
    except (OSError, TypeError):
        return False


def run_as_main(argv: list[str]) -> None:
    """Run ``[python, -m MODULE | SCRIPT, args...]`` in this process as a fresh interpreter would."""
    if _logging_state is not None:
        _logging_state.restore()
    if argv[1] == "-m":
        module = argv[2]
        sys.modules.pop(module, None)  # imported by the launcher; a fresh interpreter runs it without that copy
        sys.argv = [argv[2], *argv[3:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(argv[1])
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")


def _exec_in_process(path: str, args: list[str], env: dict[str, str] | None) -> None:
    """``os.exec*`` in a warm child: this interpreter into ``-m MODULE`` runs here, the rest execs."""
    args = list(args)
    reason = _exec_elsewhere_reason(path, args, os.environ if env is None else env)
    if reason:
        print(f"sweeper warm launcher: {path} starts as a new process ({reason})", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        if env is None:
            _real_execv(path, args)
        _real_execve(path, args, env)
    print(f"sweeper warm launcher: {args[2]} runs in this warm process (pid {os.getpid()})", file=sys.stderr)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
        _show_environment(env)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    code = 0
    try:
        run_as_main([sys.executable, *args[1:]])
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - as an interpreter would: print it, exit 1
        traceback.print_exc()
        code = 1
    _exit_process(code)


def _exec_elsewhere_reason(path: str, args: list[str], env: Any) -> str:
    """Why an ``os.exec*`` cannot run in this warm process ('' where it can)."""
    if not _same_interpreter(path):
        return f"not this launcher's interpreter, {sys.executable}"
    if len(args) < 3 or args[1] != "-m":
        return "not python -m MODULE"
    key = dict(startup_key(env))
    own = dict(_own_key)
    differing = sorted(name for name in set(key) | set(own) if key.get(name) != own.get(name))
    if differing:
        return "start-time environment differs: " + ", ".join(differing)
    return ""


def _install_exec_intercept() -> None:
    os.execv = lambda path, args: _exec_in_process(path, args, None)  # type: ignore[assignment]
    os.execve = lambda path, args, env: _exec_in_process(path, args, dict(env))  # type: ignore[assignment]


# -- vLLM's spawned processes (the engine core and workers on CPU) ------------------------

_spawn_address: str | None = None  # this process's launcher's socket (abstract namespace)
_own_key: tuple[tuple[str, str], ...] = ()  # that launcher's start-time environment
_modules: list[str] = []  # what a launcher imports (one it starts for another environment imports the same)
_HEADER = struct.Struct("!Q")


def _reset_signals() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _connect(address: str, payload: dict[str, Any], fds: list[int]) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(address)
    data = json.dumps(payload).encode()
    socket.send_fds(client, [_HEADER.pack(len(data))], fds)
    client.sendall(data)
    return client


def _launcher_address(env: dict[str, str]) -> str:
    """The socket of the launcher for ``env``'s start-time environment: this process's own
    launcher, or the one that launcher starts (and keeps) for that environment."""
    assert _spawn_address is not None
    if startup_key(env) == _own_key:
        return _spawn_address
    with _connect(_spawn_address, {"op": "address", "env": env}, []) as client:
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = client.recv(4096)
            if not chunk:
                raise OSError("the launcher closed the connection before it named an address")
            reply += chunk
    answer = json.loads(reply)
    if "address" not in answer:
        raise OSError(f"no launcher for this environment: {answer.get('error')}")
    return str(answer["address"])


def _install_spawn_through_launcher() -> None:
    """Make multiprocessing's "spawn" fork from the launcher instead of starting a new interpreter.

    What the spawned process gets is what a spawn gives it: the same file
    descriptors under the same numbers (standard streams included), the
    parent's current environment and folder, its preparation data and the
    pickled process object read from the pipe (``multiprocessing.spawn._main``).
    It joins its parent's process group, so that stopping the server stops it.
    """
    from multiprocessing import popen_spawn_posix, reduction, resource_tracker, spawn, util
    from multiprocessing.connection import wait as wait_for
    from multiprocessing.context import set_spawning_popen

    class WarmSpawnPopen(popen_spawn_posix.Popen):
        def _launch(self, process_obj: Any) -> None:
            try:
                address = _launcher_address(dict(os.environ))
            except OSError as exc:  # spawn as usual: slower, never different
                print(f"sweeper warm launcher: spawning a new interpreter ({exc})", file=sys.stderr)
                return super()._launch(process_obj)
            tracker_fd = resource_tracker.getfd()
            self._fds.append(tracker_fd)
            prep_data = spawn.get_preparation_data(process_obj._name)
            buffer = io.BytesIO()
            set_spawning_popen(self)
            try:
                reduction.dump(prep_data, buffer)
                reduction.dump(process_obj, buffer)
            finally:
                set_spawning_popen(None)
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            try:
                targets = [0, 1, 2, *self._fds, child_r, child_w]
                payload = {
                    "op": "spawn",
                    "env": dict(os.environ),
                    "cwd": os.getcwd(),
                    "pgid": os.getpgid(0),
                    "targets": targets,
                    "tracker_fd": tracker_fd,
                    "pipe_handle": child_r,
                }
                self._status: socket.socket | None = _connect(address, payload, targets)
                self.pid = _read_signed(self._status)
                self.sentinel = parent_r
                with open(parent_w, "wb", closefd=False) as pipe:
                    pipe.write(buffer.getbuffer())
            finally:
                self.finalizer = util.Finalize(self, util.close_fds, [parent_r, parent_w])
                os.close(child_r)
                os.close(child_w)

        def poll(self, flag: int = os.WNOHANG) -> int | None:
            if getattr(self, "_status", None) is None:  # spawned as usual
                return super().poll(flag)
            if self.returncode is None:
                if not wait_for([self._status], 0 if flag == os.WNOHANG else None):
                    return None
                try:
                    self.returncode = _read_signed(self._status)
                except (OSError, EOFError):
                    self.returncode = 255
                self._status.close()
            return self.returncode

    popen_spawn_posix.Popen = WarmSpawnPopen  # type: ignore[misc]


def _close_descriptors(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass


def _read_signed(conn: socket.socket) -> int:
    data = b""
    while len(data) < 8:
        chunk = conn.recv(8 - len(data))
        if not chunk:
            raise EOFError("the launcher closed the connection")
        data += chunk
    return int(struct.unpack("!q", data)[0])


def _become_spawned(request: dict[str, Any], received: list[int]) -> None:
    """In a child forked for a spawn: its parent's streams, descriptors, group, env and folder; then run."""
    code = 1
    try:
        try:
            os.setpgid(0, int(request["pgid"]))
        except OSError as exc:
            print(f"sweeper warm launcher: cannot join process group {request['pgid']}: {exc}", file=sys.stderr)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # as a spawn does: only the parent's descriptors, under their numbers
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 4096) for fd in received]
        _close_descriptors(keep=set(high))
        for fd, target in zip(high, request["targets"]):
            os.dup2(fd, int(target), inheritable=True)
        for fd in high:
            if fd not in request["targets"]:
                os.close(fd)
        _reset_signals()
        os.environ.clear()
        os.environ.update(request["env"])
        _show_environment(request["env"])
        os.chdir(request["cwd"])
        from multiprocessing import resource_tracker, spawn

        resource_tracker._resource_tracker._fd = int(request["tracker_fd"])
        fixup_main = spawn._fixup_main_from_name

        def _fixup_main_as_fresh(mod_name: str) -> None:
            sys.modules.pop(mod_name, None)  # as in a fresh interpreter, the parent's main module is not imported yet
            fixup_main(mod_name)

        spawn._fixup_main_from_name = _fixup_main_as_fresh
        _install_spawn_through_launcher()
        pipe_handle = int(request["pipe_handle"])
        code = spawn._main(pipe_handle, os.dup(pipe_handle))
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - as an interpreter would: print it, exit 1
        traceback.print_exc()
    _exit_process(code)


def _become_server(request: dict[str, Any]) -> None:
    """In the forked child: the request's session, death signal, output, env and folder; then run."""
    code = 1
    try:
        # a group of its own inside the launcher's session, so that the processes it spawns through
        # the launcher can join it (a group is joined only within its session)
        os.setpgid(0, 0)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(request.get("death_signal", signal.SIGTERM)), 0, 0, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _close_descriptors(keep={0, 1, 2})  # as a new process has: the launcher's pipes and socket are not its
        _reset_signals()
        os.environ.clear()
        os.environ.update(request["env"])
        _show_environment(request["env"])
        os.chdir(request["cwd"])
        _install_exec_intercept()
        _install_spawn_through_launcher()
        run_as_main(list(request["argv"]))
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - as an interpreter would: print it, exit 1
        traceback.print_exc()
    _exit_process(code)


def _fork(request: dict[str, Any]) -> dict[str, Any]:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        stream.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"id": request.get("id"), "error": f"fork failed: {exc}"}
    if pid == 0:  # the child never returns from here
        _become_server(request)
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
    header, fds, _, _ = socket.recv_fds(connection, _HEADER.size, 64)
    if len(header) < _HEADER.size:
        raise EOFError("the requesting process closed the connection")
    (size,) = _HEADER.unpack(header)
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError("the requesting process closed the connection")
        data += chunk
    return json.loads(data), list(fds)


class _Sublaunchers:
    """The launchers this launcher starts, one per other start-time environment its servers spawn with
    (on CPU vLLM sets the engine's and the workers' OpenMP and loader variables before it spawns them)."""

    def __init__(self) -> None:
        self.running: dict[tuple[tuple[str, str], ...], tuple[subprocess.Popen[bytes], str]] = {}

    def address(self, env: dict[str, str]) -> str:
        key = startup_key(env)
        if key in self.running and self.running[key][0].poll() is None:
            return self.running[key][1]
        # this launcher's own environment with the requested start-time part: no server's token or settings
        own = {k: v for k, v in os.environ.items() if not k.startswith(STARTUP_PREFIXES)}
        process = subprocess.Popen(  # noqa: S603 - this same program
            [sys.executable, os.path.abspath(__file__), "--spawned-by-launcher", *_modules],
            env={**own, **dict(key)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - pdeathsig only
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise OSError(f"the launcher for another start-time environment ended at its start ({process.wait()})")
        address = str(json.loads(line)["address"])
        print(
            f"sweeper warm launcher: pid {process.pid} serves another start-time environment "
            f"({', '.join(sorted({k for k, _ in key} ^ {k for k, _ in _own_key}) or 'values')})",
            file=sys.stderr,
        )
        self.running[key] = (process, address)
        return address


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


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
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        _become_spawned(request, fds)
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


CUDA_REFUSAL = (
    "warm starts are off with a CUDA build of torch: a server forked from a launcher could not use NVML "
    "on an H100, and vLLM then resolved other defaults than a fresh server (max_num_batched_tokens 2048, "
    "not 8192; 2026-12-06)"
)


def _cuda_refusal() -> str:
    """The reason this launcher forks nothing ('' where it may): torch built for CUDA."""
    try:
        importlib.import_module("torch")
    except Exception:  # noqa: BLE001 - no torch here: vLLM's own import will say what is wrong
        return ""
    return CUDA_REFUSAL if _cuda_build() else ""


def _cuda_build() -> bool:
    """Is the torch this launcher imported built for CUDA (a GPU host)?"""
    torch = sys.modules.get("torch")
    return torch is not None and getattr(getattr(torch, "version", None), "cuda", None) is not None


def main(arguments: list[str]) -> None:
    """Import, then fork on request until stdin closes (or, for a launcher another launcher started
    with ``--spawned-by-launcher``, until that launcher dies)."""
    global _logging_state, _spawn_address, _own_key, _modules
    began = time.monotonic()
    sublaunched = arguments[:1] == ["--spawned-by-launcher"]
    _modules = arguments[1:] if sublaunched else arguments
    _own_key = startup_key(os.environ)
    _hide_unloadable()
    refusal = _cuda_refusal() if "torch" in _modules else ""
    if refusal:
        _send({"ready": False, "refused": refusal})
        return
    imported = _import(_modules)
    _logging_state = _LoggingState()
    os_threads = len(os.listdir(f"/proc/{os.getpid()}/task"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _spawn_address = f"\0sweeper-warm-launcher-{os.getpid()}-{os.urandom(6).hex()}"
    listener.bind(_spawn_address)
    listener.listen(16)
    _send(
        {
            "ready": True,
            "address": _spawn_address,
            "seconds": round(time.monotonic() - began, 3),
            "imported": imported,
            "threads": threading.active_count(),
            "os_threads": os_threads,
        }
    )
    children: dict[int, socket.socket | None] = {}
    sublaunchers = _Sublaunchers()
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
    for pid, connection in children.items():  # stdin closed with servers still running: they end with us
        if connection is not None:
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise


if __name__ == "__main__":
    del sys.path[0]  # this file's folder: none of its modules may shadow what the server imports
    main(sys.argv[1:])
