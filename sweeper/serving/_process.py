"""ServerProcess: start a manifest's server, wait until it is ready, stop it cleanly.

The server runs in its own process group with the manifest's env plus
overrides added to this process's environment, from the manifest's folder,
its output going to a log file. Readiness is ``GET /v1/models`` == 200
against a monotonic deadline while the process is watched: a crash is
reported at once with its exit code and the log tail. The process that
answers must be one of ours (the listening socket is matched to the
process group). On exit the group gets SIGTERM, then SIGKILL after a grace
period, and so does every process that carries the server's token (a
``serve.py`` that daemonizes, or starts vLLM in a session of its own, leaves
the group but keeps the token); sweeper confirms that none is left and the
port is free. A process that survives SIGKILL is a ``ServerStopError``.

Every server carries a token in its environment (``SWEEPER_SERVER_TOKEN``),
so a later sweeper can find and stop a server whose owner was killed. The
server also gets a parent-death signal (``PR_SET_PDEATHSIG``: SIGTERM when
the sweeper dies, even by SIGKILL); where the kernel refuses it, the child
writes why to a file beside the log before it execs, and the parent logs it
(``parent_death_signal`` then reads False).
"""

from __future__ import annotations

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

from sweeper.errors import (
    ServerError,
    ServerIdentityError,
    ServerStartError,
    ServerStopError,
    ServerTimeoutError,
)
from sweeper.manifest import Manifest
from sweeper.serving import processes
from sweeper.serving._launcher import LaunchedProcess, WarmLaunchers, WarmPlan, warm_plan
from sweeper.serving._startup import Startup, parse_startup

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
    """Stop every process that carries this server token (one a dead sweeper left behind).

    Raises ``ServerStopError`` if one survives SIGKILL.
    """
    victims = processes.kill_by_env(TOKEN_VARIABLE, token, grace_s=grace_s)
    if victims:
        logger.warning("stopped %d process(es) of server %s: %s", len(victims), token, victims)
    return victims


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
        parent_death_signal: int = signal.SIGTERM,
        launchers: WarmLaunchers | None = None,
    ) -> None:
        self.manifest = manifest
        self.overrides = dict(overrides or {})
        self.requested_port = port
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.poll_interval_s = poll_interval_s
        self.log_tail_lines = log_tail_lines
        self.death_signal = parent_death_signal
        # False once the child reported that the parent-death signal could not be set
        self.parent_death_signal: bool | None = None
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="sweeper-server-", suffix=".log")
            os.close(handle)
            log_path = name
        self.log_path = Path(log_path)
        self.token = uuid.uuid4().hex
        self.host = self.overrides.get("HOST") or manifest.env.get("HOST") or DEFAULT_HOST
        self.port: int = 0
        self.process: subprocess.Popen[bytes] | LaunchedProcess | None = None
        self.ready_seconds: float | None = None
        self.stop_seconds: float | None = None
        self.started_wall: float | None = None  # seconds since the epoch at the exec (parse_startup's anchor)
        self.launchers = launchers
        # "warm" (forked from a launcher that had imported vLLM) or "fresh" (a new process), once started
        self.start_kind: str | None = None
        self.start_note: str | None = None  # why a server that could have started warm did not

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
                f"port {self.port} is already in use by another process; stop it or let sweeper pick a free port"
            )
        env = dict(os.environ)
        env.update(self.manifest.env)
        env.update(self.overrides)
        env.update({"PORT": str(self.port), "HOST": self.host, TOKEN_VARIABLE: self.token})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        plan = warm_plan(command) if self.launchers is not None else None
        launcher = None
        if plan is not None and plan.warm:
            assert self.launchers is not None and plan.python is not None
            try:
                launcher = self.launchers.launcher_for(plan.python, env)
            except ServerStartError as exc:  # slower, never different: a fresh process
                plan = WarmPlan(None, f"the warm launcher is not available ({exc})")
        if launcher is not None:
            logger.info(
                "starting server %r warm (forked from launcher pid %d) on port %d (log: %s)",
                self.manifest.name,
                launcher.process.pid,
                self.port,
                self.log_path,
            )
            self.log_path.touch()
            self.process = launcher.launch(
                command, env=env, cwd=self.manifest.folder, log_path=self.log_path, death_signal=self.death_signal
            )
            self._started_at = time.monotonic()
            self.started_wall = time.time()
            self.start_kind = "warm"
            self.parent_death_signal = True  # set by the child itself, towards the launcher (which has its own)
            return
        if plan is not None:
            self.start_note = f"starts fresh: {plan.reason}"
            logger.info("server %r %s", self.manifest.name, self.start_note)
        self.start_kind = "fresh"
        logger.info("starting server %r on port %d (log: %s)", self.manifest.name, self.port, self.log_path)
        setup = processes.ChildSetup(self.log_path.with_name(self.log_path.name + ".pdeathsig"), self.death_signal)
        with open(self.log_path, "ab") as log:
            try:
                self.process = subprocess.Popen(  # noqa: S603 - the user's own serve command
                    command,
                    cwd=self.manifest.folder,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=setup,  # noqa: PLW1509 - setsid + pdeathsig only
                )
            except OSError as exc:  # the command itself is missing or not executable
                raise ServerStartError(
                    f"server {self.manifest.name!r}: cannot run {command[0]!r}: {exc}",
                    kind="environment",
                ) from exc
        self._started_at = time.monotonic()
        self.started_wall = time.time()
        failure = setup.failure()
        self.parent_death_signal = failure is None
        if failure is not None:
            logger.warning(
                "server %r (pid %d) has no parent-death signal: %s; if this sweeper is "
                "killed, the next run stops it through its token",
                self.manifest.name,
                self.process.pid,
                failure,
            )

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
        """SIGTERM the group and the token's processes, wait, SIGKILL what is left, confirm.

        Raises ``ServerStopError`` when a process survives SIGKILL (after
        trying every other one).
        """
        if self.process is None or self.stop_seconds is not None:
            return
        began = time.monotonic()
        pgid = self.process.pid
        failure: ServerStopError | None = None
        try:
            processes.terminate_group(pgid, grace_s=self.stop_timeout_s, wait_for=self.process)
        except ServerStopError as exc:
            failure = exc
        try:  # a process that left the group (setsid, a daemon) still carries the token
            escaped = processes.kill_by_env(TOKEN_VARIABLE, self.token, grace_s=self.stop_timeout_s)
        except ServerStopError as exc:
            escaped, failure = exc.pids, failure or exc
        if escaped:
            logger.warning(
                "server %r: %d process(es) outside its process group stopped through its token: %s",
                self.manifest.name,
                len(escaped),
                escaped,
            )
        self.stop_seconds = time.monotonic() - began
        if failure is not None:
            failure.log_tail = self.log_tail()
            raise failure
        if not processes.wait_port_free(self.port, self.host, timeout_s=10.0):
            # every process of ours is gone (checked above): a stranger holds the port
            logger.warning(
                "port %d is still held after the server stopped, by process(es) %s "
                "that this ServerProcess did not start",
                self.port,
                sorted(processes.listening_pids(self.port) or []),
            )
        self.stop_seconds = time.monotonic() - began
        logger.info("server stopped in %.1f s", self.stop_seconds)

    def alive(self) -> bool:
        """Is the server's main process still running?"""
        return self.process is not None and self.process.poll() is None

    def startup(self) -> Startup:
        """Where this server's start went, from its log (``parse_startup``); read once it is ready."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        return parse_startup(text, self.ready_seconds, started_at=self.started_wall)

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
