"""A stand-in OpenAI-compatible server for faults real vLLM cannot produce on demand.

Not vLLM: a small HTTP server that answers the requests sweeper's
evaluators send (``/v1/models``, ``/v1/completions`` with prompt logprobs,
``/v1/chat/completions`` with usage, ``/metrics``) with made-up numbers,
and misbehaves as ``FAKE_MODE`` says:

``ok``             serve normally
``oom-once``       the first start (per ``FAKE_STATE_DIR``) prints a CUDA OOM
                   traceback and exits 1, as a start on a GPU whose memory the
                   last server still holds; later starts serve normally
``crash``          every start prints an engine-core failure and exits 1
``refuse``         exit at start with vLLM's pydantic ValidationError for a
                   speculative setting, when ``FAKE_REFUSE_IF`` (NAME=VALUE)
                   matches the environment (always when it is unset)
``hang-requests``  answer ``/v1/models``, then never answer a POST
``oom-measure``    the first chat request prints a CUDA OOM and exits 1
``escape``         serve normally, after starting a child in a session of its
                   own (a daemonized engine) that sleeps; its pid goes to
                   ``FAKE_STATE_DIR/escaped.pid``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODE = os.environ.get("FAKE_MODE", "ok")
STATE = Path(os.environ.get("FAKE_STATE_DIR", "."))
NAME = os.environ.get("SERVED_MODEL_NAME", "fake")

OOM = """Traceback (most recent call last):
  File "vllm/v1/worker/gpu_model_runner.py", line 3012, in profile_run
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 22.07 GiB of which 1.02 GiB is free."""

REFUSAL = """  File "vllm/engine/arg_utils.py", line 2099, in create_speculative_config
    return SpeculativeConfig(**self.speculative_config)
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
num_speculative_tokens
  Input should be greater than 0 [type=greater_than, input_value=0, input_type=int]"""


def refuses() -> bool:
    rule = os.environ.get("FAKE_REFUSE_IF")
    if not rule:
        return True
    name, _, value = rule.partition("=")
    return os.environ.get(name) == value


def start_faults() -> None:
    print("INFO fake server starting", flush=True)
    if MODE == "oom-once":
        marker = STATE / "oom-once.done"
        if not marker.exists():
            marker.write_text("1")
            print(OOM, flush=True)
            sys.exit(1)
    if MODE == "crash":
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        sys.exit(1)
    if MODE == "refuse" and refuses():
        print(REFUSAL, flush=True)
        sys.exit(1)
    if MODE == "escape":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"], start_new_session=True)
        (STATE / "escaped.pid").write_text(str(child.pid))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: object, status: int = 200) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models":
            self._send({"data": [{"id": NAME, "max_model_len": 1024}]})
        elif self.path == "/metrics":
            self._send("# no spec decode here\n")
        else:
            self._send({"error": "not found"}, 404)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if MODE == "hang-requests":
            time.sleep(3600)
        if self.path == "/v1/completions":
            prompt = body["prompt"]
            entries = [None] + [{str(t): {"logprob": -0.5, "rank": 1}} for t in prompt[1:]]
            self._send({"choices": [{"text": "x", "prompt_logprobs": entries}]})
        elif self.path == "/v1/chat/completions":
            if MODE == "oom-measure":
                print(OOM, flush=True)
                os._exit(1)
            tokens = int(body.get("max_tokens", 1))
            self._send(
                {
                    "choices": [{"message": {"content": "x" * tokens}, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": tokens},
                }
            )
        else:
            self._send({"error": "not found"}, 404)


def main() -> None:
    start_faults()
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    print("INFO fake server ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
