"""ServerProcess: start a manifest's server, wait until it is ready, stop it cleanly.

The server runs in its own process group with the manifest's env plus
overrides added to this process's environment, from the manifest's folder,
its output going to a log file. Readiness is ``GET /v1/models`` == 200
against a monotonic deadline while the process is watched: a crash is
reported at once with its exit code and the log tail. The process that
answers must be one of ours (the listening socket is matched to the
process group). On exit the group gets SIGTERM, then SIGKILL after a grace
period, and sweeper confirms that no process of the group is left and the
port is free.

Every server carries a token in its environment (``SWEEPER_SERVER_TOKEN``),
so a later sweeper can find and stop a server whose owner was killed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from sweeper.serving import processes
from sweeper.errors import (
    ServerError,
    ServerIdentityError,
    ServerStartError,
    ServerTimeoutError,
)
from sweeper.manifest import Manifest

logger = logging.getLogger(__name__)

TOKEN_VARIABLE = "SWEEPER_SERVER_TOKEN"
DEFAULT_HOST = "127.0.0.1"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = DEFAULT_HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def stop_servers_with_token(token: str, *, grace_s: float = 10.0) -> list[int]:
    """Stop every process that carries this server token (one a dead sweeper left behind)."""
    return processes.kill_by_env(TOKEN_VARIABLE, token, grace_s=grace_s)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    try:  # PR_SET_PDEATHSIG: SIGTERM the server if the sweeper dies, even by SIGKILL
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class ServerProcess:
    """Context manager around one model server started from a manifest.

    ``port=None`` picks a free port (passed to the server as ``PORT``);
    otherwise the manifest's own port (or the given one) is used and must
    be free. ``base_url`` is valid once the server is ready.
    """

    def __init__(
        self,
        manifest: Manifest,
        *,
        overrides: Mapping[str, str] | None = None,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        ready_timeout_s: float = 600.0,
        stop_timeout_s: float = 30.0,
        poll_interval_s: float = 0.5,
        log_tail_lines: int = 40,
    ) -> None:
        self.manifest = manifest
        self.overrides = dict(overrides or {})
        self.requested_port = port
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.poll_interval_s = poll_interval_s
        self.log_tail_lines = log_tail_lines
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="sweeper-server-", suffix=".log")
            os.close(handle)
            log_path = name
        self.log_path = Path(log_path)
        self.token = uuid.uuid4().hex
        self.host = self.overrides.get("HOST") or manifest.env.get("HOST") or DEFAULT_HOST
        self.port: int = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_seconds: float | None = None
        self.stop_seconds: float | None = None

    # -- public surface -----------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{processes.local_address(self.host)}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def served_model_name(self) -> str:
        env = {**self.manifest.env, **self.overrides}
        return (
            env.get("SERVED_MODEL_NAME")
            or self.manifest.served_model_name
            or env.get("MODEL_ID")
            or self.manifest.model_id
        )

    def __enter__(self) -> ServerProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self.process is not None:
            raise ServerError("this ServerProcess was already started")
        command = self.manifest.resolve_serve_command()
        if self.requested_port is None and "PORT" not in self.overrides:
            self.port = free_port(processes.local_address(self.host))
        else:
            self.port = int(self.overrides.get("PORT") or self.requested_port or self.manifest.port)
        if not port_is_free(self.port, processes.local_address(self.host)):
            raise ServerError(
                f"port {self.port} is already in use by another process; stop it or let "
                "sweeper pick a free port"
            )
        env = dict(os.environ)
        env.update(self.manifest.env)
        env.update(self.overrides)
        env.update({"PORT": str(self.port), "HOST": self.host, TOKEN_VARIABLE: self.token})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logger.info(
            "starting server %r on port %d (log: %s)", self.manifest.name, self.port, self.log_path
        )
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - the user's own serve command
                command,
                cwd=self.manifest.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - setsid + pdeathsig only
            )
        self._started_at = time.monotonic()

    def wait_ready(self) -> float:
        """Block until /v1/models answers 200; return the seconds it took."""
        assert self.process is not None, "start() first"
        deadline = self._started_at + self.ready_timeout_s
        url = f"{self.base_url}/v1/models"
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise ServerStartError(
                        f"server {self.manifest.name!r} exited with code {code} during start-up "
                        f"(log: {self.log_path}):\n{self.log_tail()}",
                        log_tail=self.log_tail(),
                    )
                if time.monotonic() >= deadline:
                    raise ServerTimeoutError(
                        f"server {self.manifest.name!r} was not ready within the "
                        f"{self.ready_timeout_s:.0f} s deadline (log: {self.log_path}):\n"
                        f"{self.log_tail()}",
                        log_tail=self.log_tail(),
                    )
                try:
                    response = client.get(url)
                except httpx.HTTPError:
                    response = None
                if response is not None and response.status_code == 200:
                    self._confirm_identity()
                    self.ready_seconds = time.monotonic() - self._started_at
                    logger.info("server ready after %.1f s at %s", self.ready_seconds, self.base_url)
                    return self.ready_seconds
                time.sleep(self.poll_interval_s)

    def stop(self) -> None:
        """SIGTERM the group, wait, SIGKILL what is left, confirm nothing remains."""
        if self.process is None or self.stop_seconds is not None:
            return
        began = time.monotonic()
        pgid = self.process.pid
        processes.terminate_group(pgid, grace_s=self.stop_timeout_s, wait_for=self.process)
        if not processes.wait_port_free(self.port, self.host, timeout_s=10.0):
            # our whole group is gone (terminate_group checked): a stranger holds the port
            logger.warning(
                "port %d is still held after the server stopped, by process(es) %s "
                "that this ServerProcess did not start",
                self.port,
                sorted(processes.listening_pids(self.port) or []),
            )
        self.stop_seconds = time.monotonic() - began
        logger.info("server stopped in %.1f s", self.stop_seconds)

    def log_tail(self, lines: int | None = None) -> str:
        return processes.read_tail(self.log_path, lines or self.log_tail_lines)

    # -- internals ------------------------------------------------------------

    def _confirm_identity(self) -> None:
        assert self.process is not None
        owners = processes.listening_pids(self.port)
        if owners is None:  # no /proc: cannot tell, the port was free before start
            return
        ours = set(processes.group_members(self.process.pid))
        if owners and not owners & ours:
            raise ServerIdentityError(
                f"the server answering on port {self.port} is not the one sweeper started "
                f"(listening process(es) {sorted(owners)}, ours {sorted(ours)})",
                log_tail=self.log_tail(),
            )
