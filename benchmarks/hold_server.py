"""Start one server of a manifest, run a command against it, stop the server.

So that several benchmarks measure one and the same server (``sweeper
serve`` of the manifest, through ``ServerProcess``: its own process group,
readiness against a deadline, SIGTERM then SIGKILL at the end)::

    python benchmarks/hold_server.py --manifest M [--log server.log] -- COMMAND ...

The command gets ``PARITY_BASE_URL``, ``PARITY_MODEL`` (the served model
name) and ``PARITY_SERVER_PID`` in its environment; its exit code is this
script's. ``--server-cpus 2-5`` starts the server on those CPUs only (its
processes inherit the affinity), ``--client-cpus`` runs the command on
others; without them both may run anywhere.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweeper.errors import UserInputError  # noqa: E402
from sweeper.manifest import Manifest  # noqa: E402
from sweeper.serving import ServerProcess  # noqa: E402


def cpu_list(text: str) -> set[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}, each CPU one this process may use."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or int(high or low) < int(low):
            raise argparse.ArgumentTypeError(f"a CPU list is like 0-3,8, not {text!r}")
        cpus |= set(range(int(low), int(high or low) + 1))
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(f"CPUs {text!r}: this process may use only {sorted(allowed)}")
    return cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--log", default="server.log", help="the server's output (default server.log)")
    parser.add_argument("--ready-timeout", type=float, default=900)
    parser.add_argument("--server-cpus", type=cpu_list, help="run the server on these CPUs only (0-3,8)")
    parser.add_argument("--client-cpus", type=cpu_list, help="run the command on these CPUs only")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    try:
        manifest = Manifest.load(args.manifest)
    except UserInputError as exc:
        parser.exit(2, f"hold_server: {exc}\n")
    everywhere = os.sched_getaffinity(0)
    if args.server_cpus:
        os.sched_setaffinity(0, args.server_cpus)  # the server's processes inherit it
    with ServerProcess(manifest, log_path=args.log, ready_timeout_s=args.ready_timeout) as server:
        os.sched_setaffinity(0, args.client_cpus or everywhere)
        if args.server_cpus or args.client_cpus:
            print(
                f"server on CPUs {sorted(args.server_cpus or everywhere)}, the command on "
                f"{sorted(args.client_cpus or everywhere)}",
                flush=True,
            )
        print(
            f"server ready in {server.ready_seconds:.0f} s at {server.base_url} (pid {server.pid}); log {args.log}",
            flush=True,
        )
        env = {
            **os.environ,
            "PARITY_BASE_URL": server.base_url,
            "PARITY_MODEL": server.served_model_name,
            "PARITY_SERVER_PID": str(server.pid),
        }
        code = subprocess.run(command, env=env, check=False).returncode
    print(f"server stopped; the command's exit code {code}", flush=True)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
