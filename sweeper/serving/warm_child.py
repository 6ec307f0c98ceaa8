"""What a process forked by the warm launcher becomes: a server, or a process a server spawns.

A server child (``become_server``) takes the request's session, death
signal, output, environment and folder, then runs its command as a fresh
interpreter would (``run_as_main``); an ``os.exec*`` of this same
interpreter into ``-m MODULE`` with the launcher's start-time environment
runs in the same process instead. A process the server spawns through
multiprocessing (vLLM's engine core and workers on CPU) is forked by a
launcher too (``install_spawn_through_launcher`` on the server's side,
``become_spawned`` in the child), with what a spawn would give it.

Loaded by ``warm_launcher.py`` (run by its path, without sweeper installed),
this module imports nothing of sweeper either. ``launcher`` holds what the
launcher's children inherit: its socket, its start-time environment
(``startup_key``) and its logging set-up.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import fcntl
import io
import json
import logging
import os
import runpy
import signal
import socket
import struct
import sys
import traceback
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
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


# ... but for these, which vLLM and Triton read only when they compile, load or save (never while a
# module imports): the compile-cache folders (``_compile_cache.py``), one per speculative-token
# count, so that one launcher forks every K's server (``test_warm_vllm.py`` checks that vLLM and
# Triton read them after the launcher's imports, as a forked child sets them)
READ_WHEN_USED = frozenset({"VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"})


def startup_key(env: Any) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` that a process reads as it starts: which launcher may fork it."""
    return tuple(
        sorted(
            (key, value) for key, value in env.items() if key.startswith(STARTUP_PREFIXES) and key not in READ_WHEN_USED
        )
    )


_real_execv = os.execv
_real_execve = os.execve


def _exit_process(code: int) -> NoReturn:
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


def environment_changes(before: Any, after: Any) -> dict[str, tuple[str | None, str | None]]:
    """What turned ``before`` into ``after``: each variable that differs, with its two values (None: unset)."""
    return {key: (before.get(key), after.get(key)) for key in {*before, *after} if before.get(key) != after.get(key)}


def _apply(env: dict[str, str], values: dict[str, str | None]) -> dict[str, str]:
    applied = dict(env)
    for key, value in values.items():
        if value is None:
            applied.pop(key, None)
        else:
            applied[key] = value
    return applied


def _without_import_changes(env: dict[str, str]) -> dict[str, str]:
    """``env`` as it was before the launcher's imports changed it: what a program that took its
    environment from a warm child passes on, as a fresh one (which had not imported them) would."""
    changed = {key: before for key, (before, after) in launcher.import_changes.items() if env.get(key) == after}
    return _apply(env, changed)


def _take_environment(env: dict[str, str]) -> None:
    """Make ``env`` this process's environment, as a new interpreter given ``env`` has it once the
    launcher's modules are imported: ``env`` with what those imports changed (``import_changes``).

    The kernel's view (``/proc/<pid>/environ``) shows ``env`` itself, as a new process's shows
    what it was started with."""
    os.environ.clear()
    os.environ.update(_apply(env, {key: after for key, (_, after) in launcher.import_changes.items()}))
    _show_environment(env)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


class LoggingState:
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


@dataclasses.dataclass
class LauncherState:
    """What the launcher sets once it is ready and its forked children inherit (mutable: it is
    this process's own state, set by ``warm_launcher.main``)."""

    spawn_address: str | None = None  # the launcher's socket (abstract namespace)
    own_key: tuple[tuple[str, str], ...] = ()  # the launcher's start-time environment
    logging_state: LoggingState | None = None  # the logging set-up as the imports left it
    # what the launcher's imports changed in its environment: each variable's value before and after
    # (None: unset). A fresh interpreter's imports would make the same changes, so each child takes
    # them too (vLLM's own import sets PYTORCH_NVML_BASED_CUDA_CHECK and TORCHINDUCTOR_COMPILE_THREADS,
    # which the engine it spawns inherits)
    import_changes: dict[str, tuple[str | None, str | None]] = dataclasses.field(default_factory=dict)


launcher = LauncherState()


def _same_interpreter(path: str) -> bool:
    try:
        return os.path.realpath(path) == os.path.realpath(sys.executable)
    except (OSError, TypeError):
        return False


def run_as_main(argv: list[str]) -> None:
    """Run ``[python, -m MODULE | SCRIPT, args...]`` in this process as a fresh interpreter would."""
    if launcher.logging_state is not None:
        launcher.logging_state.restore()
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


def _exec_in_process(path: Any, args: Any, env: dict[str, str] | None) -> NoReturn:
    """``os.exec*`` in a warm child: this interpreter into ``-m MODULE`` runs here, the rest execs.
    ``path`` and ``args`` are as the caller gave them to ``os.exec*``."""
    args = list(args)
    # what a fresh program would have passed: without what the launcher's imports changed
    started_with = _without_import_changes(dict(os.environ if env is None else env))
    reason = _exec_elsewhere_reason(path, args, started_with)
    if reason:
        print(f"sweeper warm launcher: {path} starts as a new process ({reason})", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _real_execve(path, args, started_with)
    print(f"sweeper warm launcher: {args[2]} runs in this warm process (pid {os.getpid()})", file=sys.stderr)
    _take_environment(started_with)
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
    own = dict(launcher.own_key)
    differing = sorted(name for name in set(key) | set(own) if key.get(name) != own.get(name))
    if differing:
        return "start-time environment differs: " + ", ".join(differing)
    return ""


def _execv(path: Any, argv: Any) -> NoReturn:
    _exec_in_process(path, argv, None)


def _execve(path: Any, argv: Any, env: Any) -> NoReturn:
    _exec_in_process(path, argv, dict(env))


def _install_exec_intercept() -> None:
    os.execv = _execv
    os.execve = _execve


# -- vLLM's spawned processes (the engine core and workers on CPU) ------------------------

HEADER = struct.Struct("!Q")  # a request's length, before its JSON (and the descriptors it passes)


def _reset_signals() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _connect(address: str, payload: dict[str, Any], fds: list[int]) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(address)
    data = json.dumps(payload).encode()
    socket.send_fds(client, [HEADER.pack(len(data))], fds)
    client.sendall(data)
    return client


def _launcher_address(env: dict[str, str]) -> str:
    """The socket of the launcher for ``env``'s start-time environment: this process's own
    launcher, or the one that launcher starts (and keeps) for that environment."""
    address = launcher.spawn_address
    assert address is not None  # set by the launcher before it forks anything
    if startup_key(env) == launcher.own_key:
        return address
    with _connect(address, {"op": "address", "env": env}, []) as client:
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


def install_spawn_through_launcher() -> None:
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

    # what this relies on of multiprocessing's private API (Popen._launch and _fds, util.close_fds)
    # is not in typeshed
    spawn_popen: Any = popen_spawn_posix.Popen
    private_util: Any = util

    class WarmSpawnPopen(spawn_popen):
        returncode: int | None  # set by Popen.__init__, then by poll

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
                status = _connect(address, payload, targets)
                self._status: socket.socket | None = status
                self.pid = _read_signed(status)
                self.sentinel = parent_r
                with open(parent_w, "wb", closefd=False) as pipe:
                    pipe.write(buffer.getbuffer())
            finally:
                self.finalizer = util.Finalize(self, private_util.close_fds, [parent_r, parent_w])
                os.close(child_r)
                os.close(child_w)

        def poll(self, flag: int = os.WNOHANG) -> int | None:
            status: socket.socket | None = getattr(self, "_status", None)
            if status is None:  # spawned as usual
                return super().poll(flag)
            if self.returncode is None:
                if not wait_for([status], 0 if flag == os.WNOHANG else None):
                    return None
                try:
                    self.returncode = _read_signed(status)
                except (OSError, EOFError):
                    self.returncode = 255
                status.close()
            return self.returncode

    popen_spawn_posix.Popen = WarmSpawnPopen  # type: ignore[misc]  # replacing the class is the point


# device files a library loaded in the launcher keeps open and caches (the NVIDIA driver's, opened by
# NVML when vLLM's platform probe runs at import): closed in a child, its next NVML call fails with
# "The operating system has blocked the request", and vLLM then resolves other defaults
KEPT_DEVICE_FILES = ("/dev/nvidia",)


def _close_descriptors(keep: set[int]) -> None:
    """Close every descriptor but ``keep`` and those on ``KEPT_DEVICE_FILES``."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep or _is_kept_device_file(fd):
            continue
        try:
            os.close(fd)
        except OSError:
            pass


def _is_kept_device_file(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(KEPT_DEVICE_FILES)
    except OSError:
        return False


def _read_signed(conn: socket.socket) -> int:
    data = b""
    while len(data) < 8:
        chunk = conn.recv(8 - len(data))
        if not chunk:
            raise EOFError("the launcher closed the connection")
        data += chunk
    return int(struct.unpack("!q", data)[0])


def become_spawned(request: dict[str, Any], received: list[int]) -> None:
    """In a child forked for a spawn: its parent's streams, descriptors, group, env and folder; then run."""
    code = 1
    try:
        try:
            os.setpgid(0, int(request["pgid"]))
        except OSError as exc:
            print(f"sweeper warm launcher: cannot join process group {request['pgid']}: {exc}", file=sys.stderr)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # as a spawn does: only the parent's descriptors, under their numbers
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 4096) for fd in received]
        _close_descriptors(keep=set(high))
        for fd, target in zip(high, request["targets"]):
            os.dup2(fd, int(target), inheritable=True)
        for fd in high:
            if fd not in request["targets"]:
                os.close(fd)
        _reset_signals()
        _take_environment(request["env"])
        os.chdir(request["cwd"])
        from multiprocessing import resource_tracker, spawn

        # multiprocessing's private API (the tracker's _fd, spawn._fixup_main_from_name): not in typeshed
        tracker: Any = resource_tracker._resource_tracker
        private_spawn: Any = spawn
        tracker._fd = int(request["tracker_fd"])
        fixup_main = private_spawn._fixup_main_from_name

        def _fixup_main_as_fresh(mod_name: str) -> None:
            sys.modules.pop(mod_name, None)  # as in a fresh interpreter, the parent's main module is not imported yet
            fixup_main(mod_name)

        private_spawn._fixup_main_from_name = _fixup_main_as_fresh
        install_spawn_through_launcher()
        pipe_handle = int(request["pipe_handle"])
        code = spawn._main(pipe_handle, os.dup(pipe_handle))
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - as an interpreter would: print it, exit 1
        traceback.print_exc()
    _exit_process(code)


def become_server(request: dict[str, Any]) -> None:
    """In the forked child: the request's session, death signal, output, env and folder; then run."""
    code = 1
    try:
        # a group of its own inside the launcher's session, so that the processes it spawns through
        # the launcher can join it (a group is joined only within its session)
        os.setpgid(0, 0)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(request.get("death_signal", signal.SIGTERM)), 0, 0, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _close_descriptors(keep={0, 1, 2})  # as a new process has: the launcher's pipes and socket are not its
        _reset_signals()
        _take_environment(request["env"])
        os.chdir(request["cwd"])
        _install_exec_intercept()
        install_spawn_through_launcher()
        run_as_main(list(request["argv"]))
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - as an interpreter would: print it, exit 1
        traceback.print_exc()
    _exit_process(code)
