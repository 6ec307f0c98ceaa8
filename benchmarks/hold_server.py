"""Start one server of a manifest, run a command against it, stop the server.

So that several benchmarks measure one and the same server (``sweeper
serve`` of the manifest, through ``ServerProcess``: its own process group,
readiness against a deadline, SIGTERM then SIGKILL at the end)::

    python benchmarks/hold_server.py --manifest M [--log server.log] -- COMMAND ...

The command gets ``PARITY_BASE_URL``, ``PARITY_MODEL`` (the served model
name) and ``PARITY_SERVER_PID`` in its environment; its exit code is this
script's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweeper.manifest import Manifest  # noqa: E402
from sweeper.serving import ServerProcess  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--log", default="server.log", help="the server's output (default server.log)")
    parser.add_argument("--ready-timeout", type=float, default=900)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    manifest = Manifest.load(args.manifest)
    with ServerProcess(manifest, log_path=args.log, ready_timeout_s=args.ready_timeout) as server:
        print(f"server ready in {server.ready_seconds:.0f} s at {server.base_url} (pid {server.pid}); "
              f"log {args.log}", flush=True)  # fmt: skip
        env = {**os.environ, "PARITY_BASE_URL": server.base_url, "PARITY_MODEL": server.served_model_name,
               "PARITY_SERVER_PID": str(server.pid)}  # fmt: skip
        code = subprocess.run(command, env=env, check=False).returncode
    print(f"server stopped; the command's exit code {code}", flush=True)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
