"""Process-group and port facts read from the operating system (Linux /proc).

Used by ServerProcess to stop a server's whole group and every process
that carries its token (one that left the group with setsid or a double
fork), to confirm that the process listening on a port is ours, and by the
study to find servers left behind by a sweeper that was killed. A process
that survives SIGKILL (stuck in the kernel, in uninterruptible sleep) is a
``ServerStopError``, so the caller fails one trial instead of the study.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from sweeper.errors import ServerStopError

logger = logging.getLogger(__name__)

_PROC = Path("/proc")
SIGKILL = signal.SIGKILL


def _live_pids() -> Iterator[int]:
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    if not _PROC.is_dir():
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except OSError:
            return []
    members = []
    for pid in _live_pids():
        fields = _stat_fields(pid)
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(pid)
    return members


class ChildProcess(Protocol):
    """What ``terminate_group`` reaps: a ``subprocess.Popen``, or a server a warm launcher forked."""

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def terminate_group(pgid: int, *, grace_s: float, wait_for: ChildProcess | None = None) -> None:
    """SIGTERM the group, wait up to ``grace_s``, SIGKILL survivors, wait until none is left."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if wait_for is not None:
            wait_for.poll()
        if not group_members(pgid):
            break
        time.sleep(0.2)
    else:
        survivors = group_members(pgid)
        logger.warning(
            "server group %d still has %d process(es) after %.0f s: sending SIGKILL",
            pgid,
            len(survivors),
            grace_s,
        )
        _signal_group(pgid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 10.0
        while group_members(pgid) and time.monotonic() < kill_deadline:
            time.sleep(0.1)
    if wait_for is not None:
        try:
            wait_for.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
    left = group_members(pgid)
    if left:
        raise ServerStopError(
            f"process(es) {left} of server group {pgid} survived SIGKILL "
            f"(state {', '.join(_state(pid) for pid in left)})",
            pids=left,
        )


def _state(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[0] if fields else "?"


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def local_address(host: str) -> str:
    """Where to reach (or probe the port of) a server bound to ``host``: the
    loopback address for the wildcard ``0.0.0.0`` or an empty host."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def wait_port_free(port: int, host: str, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    bind_host = local_address(host)
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((bind_host, port))
                return True
            except OSError:
                pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def listening_pids(port: int) -> set[int] | None:
    """PIDs holding a listening TCP socket on ``port``; None where /proc cannot tell."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], parts[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return None if not _PROC.is_dir() else set()
    owners = set()
    for pid in _live_pids():
        fd_dir = _PROC / str(pid) / "fd"
        try:
            for fd in fd_dir.iterdir():
                try:
                    if os.readlink(fd) in inodes:
                        owners.add(pid)
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return owners


def pids_with_env(variable: str, value: str) -> list[int]:
    """Live processes whose environment holds ``variable=value`` (readable ones only).

    This process is never one of them; a zombie has an empty environment.
    """
    needle = f"{variable}={value}".encode()
    own = os.getpid()
    found = []
    for pid in _live_pids():
        if pid == own:
            continue
        try:
            environ = (_PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


def environ_of(pid: int) -> dict[str, str] | None:
    """The environment of process ``pid``; None when it is gone or not readable."""
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def pids_with_variable(variable: str) -> dict[int, str]:
    """Every readable process whose environment sets ``variable``, with its value."""
    found = {}
    for pid in _live_pids():
        environ = environ_of(pid)
        if environ is not None and variable in environ:
            found[pid] = environ[variable]
    return found


def kill_by_env(variable: str, value: str, *, grace_s: float = 10.0, kill_wait_s: float = 10.0) -> list[int]:
    """Stop every process carrying ``variable=value``: SIGTERM, wait, SIGKILL. Returns them.

    Raises ``ServerStopError`` when one is still there ``kill_wait_s`` after SIGKILL.
    """
    victims = pids_with_env(variable, value)
    if not victims:
        return []
    _signal_all(victims, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pids_with_env(variable, value):
        time.sleep(0.2)
    stubborn = pids_with_env(variable, value)
    if stubborn:
        logger.warning(
            "%d process(es) carrying %s=%s still there after %.0f s: sending SIGKILL",
            len(stubborn),
            variable,
            value,
            grace_s,
        )
        _signal_all(stubborn, signal.SIGKILL)
        deadline = time.monotonic() + kill_wait_s
        while time.monotonic() < deadline and pids_with_env(variable, value):
            time.sleep(0.1)
    survivors = pids_with_env(variable, value)
    if survivors:
        raise ServerStopError(
            f"process(es) {survivors} carrying {variable}={value} survived SIGKILL "
            f"(state {', '.join(_state(pid) for pid in survivors)})",
            pids=survivors,
        )
    return sorted(set(victims) | set(stubborn))


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def read_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file (empty if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


_PR_SET_PDEATHSIG = 1
_PR_GET_PDEATHSIG = 2


class ChildSetup:
    """Runs in the child between fork and exec: a session of its own, the parent-death signal.

    The child cannot log, so a failure to set the signal is written to
    ``report_path`` (plain ``os`` calls only: no locks after fork); the
    parent reads it once ``Popen`` has returned (the child has exec'd by then).
    """

    def __init__(self, report_path: Path, death_signal: int) -> None:
        self.report_path = str(report_path)
        self.death_signal = death_signal
        self._prctl: Callable[..., Any] | None
        try:  # looked up in the parent: nothing but the call is left for the child
            self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            self._prctl = None
        self._read_back = ctypes.c_int(0)

    def __call__(self) -> None:
        os.setsid()
        if self._prctl is None:
            return self._report("prctl is not available (not Linux?)")
        if self._prctl(_PR_SET_PDEATHSIG, self.death_signal, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            return self._report(
                f"prctl(PR_SET_PDEATHSIG, {self.death_signal}) failed: {os.strerror(errno)} (errno {errno})"
            )
        self._prctl(_PR_GET_PDEATHSIG, ctypes.byref(self._read_back), 0, 0, 0)
        if self._read_back.value != self.death_signal:
            self._report(f"PR_GET_PDEATHSIG reads {self._read_back.value}, not {self.death_signal}")

    def _report(self, text: str) -> None:
        try:
            fd = os.open(self.report_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, text.encode())
            os.close(fd)
        except OSError:
            pass

    def failure(self) -> str | None:
        """What the child reported (and the report file removed), or None if all went well."""
        try:
            text = Path(self.report_path).read_text()
        except OSError:
            return None
        Path(self.report_path).unlink(missing_ok=True)
        return text or "unknown failure"
