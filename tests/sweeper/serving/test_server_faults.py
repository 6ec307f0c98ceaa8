"""ServerProcess under faults a real vLLM cannot produce on demand.

The serve commands here are small stand-in programs written for fault
injection (exit at start, never ready, a stranger on the port); the real
vLLM server is exercised in test_server_vllm.py.
"""

from __future__ import annotations

import json
import socket
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from sweeper.errors import ServerError, ServerIdentityError, ServerStartError, ServerTimeoutError
from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess, free_port, port_is_free, processes


def stand_in(tmp_path: Path, body: str) -> Manifest:
    script = tmp_path / "stand_in.py"
    script.write_text(textwrap.dedent(body))
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"name": "stand-in", "serve": ["python", str(script)], "env": {}}))
    return Manifest.load(path)


def test_server_that_exits_at_start_is_reported_at_once(tmp_path: Path):
    manifest = stand_in(
        tmp_path,
        """
        import sys
        print("loading weights... failed: out of cheese", flush=True)
        sys.exit(3)
        """,
    )
    began = time.monotonic()
    server = ServerProcess(manifest, ready_timeout_s=60, log_path=tmp_path / "log.txt")
    with pytest.raises(ServerStartError) as caught:
        with server:
            pass
    assert time.monotonic() - began < 15  # not the 60 s deadline
    assert "exited with code 3" in str(caught.value)
    assert "out of cheese" in caught.value.log_tail
    assert processes.group_members(server.pid) == []


def test_server_that_never_gets_ready_times_out_and_is_stopped(tmp_path: Path):
    manifest = stand_in(
        tmp_path,
        """
        import os, subprocess, sys, time
        # a child in the same group, as vLLM's engine process would be
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("pid", os.getpid(), flush=True)
        time.sleep(600)
        """,
    )
    server = ServerProcess(manifest, ready_timeout_s=3, stop_timeout_s=5, log_path=tmp_path / "l")
    began = time.monotonic()
    with pytest.raises(ServerTimeoutError) as caught:
        with server:
            pass
    assert "3 s deadline" in str(caught.value)
    assert time.monotonic() - began < 20
    assert processes.group_members(server.pid) == []
    assert port_is_free(server.port)


def test_sigterm_ignoring_server_is_killed(tmp_path: Path):
    manifest = stand_in(
        tmp_path,
        """
        import os, signal, time
        from http.server import BaseHTTPRequestHandler, HTTPServer
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
            def log_message(self, *a): pass
        HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
        """,
    )
    server = ServerProcess(manifest, ready_timeout_s=30, stop_timeout_s=2, log_path=tmp_path / "l")
    with server:
        assert server.ready_seconds is not None
        pid = server.pid
    assert server.stop_seconds >= 2  # waited the grace period, then SIGKILL
    assert processes.group_members(pid) == []
    assert port_is_free(server.port)


def test_port_taken_by_a_stranger_is_refused(tmp_path: Path):
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": [{"id": "tiny-gemma4"}]}')

        def log_message(self, *args):
            pass

    stranger = HTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=stranger.serve_forever, daemon=True)
    thread.start()
    try:
        manifest = stand_in(tmp_path, "import time; time.sleep(60)\n")
        server = ServerProcess(manifest, port=stranger.server_port, log_path=tmp_path / "l")
        with pytest.raises(ServerError, match=f"port {stranger.server_port} is already in use"):
            server.start()
        assert server.process is None
    finally:
        stranger.shutdown()


def test_answer_from_a_process_outside_the_group_is_detected(tmp_path: Path):
    # The serve command starts a detached listener in a new session (another
    # group) and then idles: the port answers, but not from our server.
    listener = tmp_path / "listener.py"
    listener.write_text(
        textwrap.dedent(
            """
            import os
            from http.server import BaseHTTPRequestHandler, HTTPServer
            class H(BaseHTTPRequestHandler):
                def do_GET(self):
                    self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
                def log_message(self, *a): pass
            HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
            """
        )
    )
    manifest = stand_in(
        tmp_path,
        f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, {str(listener)!r}], start_new_session=True)
        time.sleep(600)
        """,
    )
    server = ServerProcess(manifest, ready_timeout_s=30, stop_timeout_s=5, log_path=tmp_path / "l")
    try:
        with pytest.raises(ServerIdentityError, match="not the one sweeper started"):
            with server:
                pass
        assert processes.group_members(server.pid) == []
    finally:  # the detached listener carries the server's token: stop it too
        processes.kill_by_env("SWEEPER_SERVER_TOKEN", server.token, grace_s=5)


def test_leftover_server_is_found_by_its_token(tmp_path: Path):
    manifest = stand_in(tmp_path, "import time; time.sleep(600)\n")
    server = ServerProcess(manifest, log_path=tmp_path / "l")
    server.start()
    try:
        deadline = time.monotonic() + 10
        while not processes.pids_with_env("SWEEPER_SERVER_TOKEN", server.token):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        victims = processes.kill_by_env("SWEEPER_SERVER_TOKEN", server.token, grace_s=5)
        assert server.pid in victims
        assert processes.pids_with_env("SWEEPER_SERVER_TOKEN", server.token) == []
    finally:
        server.stop()


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_serve_script_that_escapes_its_group_is_stopped_through_its_token(tmp_path: Path):
    """A stand-in for a serve.py that daemonizes: it answers /v1/models, then starts a
    child in a new session (setsid, as a daemonizing script or a detached vLLM engine
    would) that outlives the group; stopping the server must stop that child too."""
    manifest = stand_in(
        tmp_path,
        """
        import os, subprocess, sys, time
        from http.server import BaseHTTPRequestHandler, HTTPServer
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        open(os.environ["ESCAPED_PID_FILE"], "w").write(str(child.pid))
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
            def log_message(self, *a): pass
        HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
        """,
    )
    pid_file = tmp_path / "escaped.pid"
    server = ServerProcess(
        manifest,
        overrides={"ESCAPED_PID_FILE": str(pid_file)},
        ready_timeout_s=30,
        stop_timeout_s=3,
        log_path=tmp_path / "l",
    )
    with server:
        escaped = int(pid_file.read_text())
        assert escaped not in processes.group_members(server.pid)  # it left the group
        assert escaped in processes.pids_with_env("SWEEPER_SERVER_TOKEN", server.token)
    assert processes.pids_with_env("SWEEPER_SERVER_TOKEN", server.token) == []
    assert not Path(f"/proc/{escaped}/environ").exists() or processes._state(escaped) == "Z"
    assert processes.group_members(server.pid) == []


def test_a_parent_death_signal_that_cannot_be_set_is_logged(tmp_path: Path, caplog):
    """The kernel refuses PR_SET_PDEATHSIG for an invalid signal number: the honest way to
    make the child's prctl fail on demand. The child reports it, the parent logs it."""
    manifest = stand_in(tmp_path, "import time; time.sleep(600)\n")
    server = ServerProcess(manifest, log_path=tmp_path / "l", parent_death_signal=999)
    with caplog.at_level("WARNING", logger="sweeper.serving._process"):
        server.start()
        try:
            assert server.parent_death_signal is False
        finally:
            server.stop()
    assert any("has no parent-death signal" in r.message and "Invalid argument" in r.message for r in caplog.records)
    assert not (tmp_path / "l.pdeathsig").exists()

    ok = ServerProcess(manifest, log_path=tmp_path / "l2")
    ok.start()
    try:
        assert ok.parent_death_signal is True
        sigcatch = Path(f"/proc/{ok.pid}/status").read_text()
        assert "SigCgt" in sigcatch  # the child exec'd: it is the stand-in now
    finally:
        ok.stop()


def test_a_missing_interpreter_is_an_environment_failure(tmp_path: Path):
    """A serve script whose interpreter is gone (a server venv that was removed): the
    kernel's exec fails, which is an environment problem, not a bug that ends the study."""
    script = tmp_path / "serve.sh"
    script.write_text("#!/no/such/venv/bin/python\nprint('never')\n")
    script.chmod(0o755)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"name": "gone-venv", "serve": [str(script)], "env": {}}))
    server = ServerProcess(Manifest.load(path), log_path=tmp_path / "l")
    with pytest.raises(ServerStartError) as caught:
        server.start()
    assert caught.value.kind == "environment"
    assert "cannot run" in str(caught.value) and "serve.sh" in str(caught.value)
