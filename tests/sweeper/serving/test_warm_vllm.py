"""Warm starts with real vLLM: a forked server measures what a fresh one does, and dies with sweeper."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluators import PplSettings, TpsSettings
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, evaluate, load_eval_data
from sweeper.serving import START_PHASES, ServerProcess, processes, resolved_config
from sweeper.serving._compile_cache import MODEL_INFOS

pytestmark = pytest.mark.server

OVERRIDES = {"SLIDING_WINDOW": "24", "CENTROID_TOP_K": "4"}


def _environment_view(pid: int) -> dict[str, str]:
    """The kernel's view of a process's environment: what it was started with (a spawned process: its
    parent's environment at the spawn)."""
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in entries if b"=" in e)


def _is_exec_of_resource_tracker(pid: int) -> bool:
    return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()


def _measure(manifest: Manifest, tmp_path: Path, kind: str) -> tuple[dict, ServerProcess, list[dict[str, str]]]:
    demo = demo_paths()
    settings = EvalSettings(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        tps=TpsSettings(num_prompts=2, output_len=32, warmup_requests=1),
        ppl=PplSettings(max_records=4),
        overrides=OVERRIDES,
        save_reference=tmp_path / f"{kind}-tokens.json",
        reference_prompts=2,
        log_path=tmp_path / f"{kind}.log",
        warm_start=kind.startswith("warm"),
        ready_timeout_s=600,
    )
    servers: list[ServerProcess] = []
    spawned: list[dict[str, str]] = []  # the environment of the resource tracker the server execs

    class Keep:
        def server_created(self, server: ServerProcess) -> None:
            servers.append(server)

        def phase_ended(self, phase: str, seconds: float) -> None:
            if not spawned and servers:  # the first phase on a ready server: its engine runs
                members = processes.group_members(servers[0].pid)
                spawned.extend(_environment_view(pid) for pid in members if _is_exec_of_resource_tracker(pid))

        def server_stopped(self, server: ServerProcess) -> None:
            pass

    result = evaluate(manifest, settings, data=load_eval_data(manifest, settings), hooks=Keep())  # type: ignore[arg-type]
    return result.to_dict(), servers[0], spawned


def test_a_warm_server_measures_what_a_fresh_one_does(demo_manifest: Manifest, tmp_path: Path) -> None:
    # warm twice: the first start also starts the launchers (the API server's, and on CPU the
    # engine's and the worker's, whose OpenMP and loader variables vLLM sets before it spawns them)
    results = {kind: _measure(demo_manifest, tmp_path, kind) for kind in ("fresh", "warm", "warm-again")}
    (fresh, fresh_server, fresh_spawned), (warm, warm_server, warm_spawned) = results["fresh"], results["warm-again"]
    assert fresh_server.start_kind == "fresh"
    assert warm_server.start_kind == results["warm"][1].start_kind == "warm"

    # the same figures that do not depend on timing: PPL to the last digit, the greedy tokens
    assert warm["ppl"] == fresh["ppl"] == results["warm"][0]["ppl"]
    tokens = {
        kind: [e["token_ids"] for e in json.loads((tmp_path / f"{kind}-tokens.json").read_text())["entries"]]
        for kind in results
    }
    assert tokens["warm"] == tokens["warm-again"] == tokens["fresh"] and all(tokens["fresh"])
    # the configuration vLLM resolved, as its own log lines state it
    configs = {kind: resolved_config((tmp_path / f"{kind}.log").read_text()) for kind in results}
    assert len(configs["fresh"]) == 2 and configs["warm"] == configs["warm-again"] == configs["fresh"]
    # the knobs reached the warm server: the drafter's centroid top-k and the window
    warm_log = (tmp_path / "warm-again.log").read_text()
    assert "top_k=4," in warm_log and '"sliding_window": 24' in warm_log
    # a worker forked without the OpenMP variables vLLM sets for it read 18x slower than a fresh one
    # (seen while this was built); the equivalence itself is benchmarks/warm_start.py's question
    assert warm["tps"] > 0.5 * fresh["tps"] and fresh["tps"] > 0.5 * warm["tps"]

    # the API server's environment as the engine gets it, with what vLLM's import set (its engine and
    # worker retitle themselves over the kernel's view of theirs; multiprocessing's resource tracker,
    # a new interpreter the server execs, shows it): only the server's port and token differ
    def comparable(views: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{k: v for k, v in view.items() if k not in ("PORT", "SWEEPER_SERVER_TOKEN")} for view in views]

    assert len(fresh_spawned) == 1 and comparable(warm_spawned) == comparable(fresh_spawned)
    assert fresh_spawned[0]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"

    # the start phases: the same steps, in order; the warm one skipped the API server's imports
    fresh_phases, warm_phases = dict(fresh_server.startup().stored()), dict(warm_server.startup().stored())
    assert list(warm_phases) == list(fresh_phases) == [p for p in START_PHASES if p in fresh_phases]
    assert fresh_phases["api imports"] >= 2.0 and warm_phases["api imports"] <= 1.0
    assert warm_server.ready_seconds < fresh_server.ready_seconds
    # nothing of either server is left
    for server in (fresh_server, warm_server):
        assert processes.group_members(server.pid) == []


READ_AFTER_IMPORTS = """
import importlib, json, os, sys
from sweeper.serving._launcher import WARM_MODULES
for name in WARM_MODULES:
    importlib.import_module(name)
os.environ.update(VLLM_CACHE_ROOT=sys.argv[1], TRITON_CACHE_DIR=sys.argv[2])  # as a forked child applies its own
import triton
import vllm.envs
from vllm.model_executor.models.registry import _LazyRegisteredModel
print(json.dumps([vllm.envs.VLLM_CACHE_ROOT, str(_LazyRegisteredModel._get_cache_dir()), triton.knobs.cache.dir]))
"""


def test_the_compile_cache_folders_are_read_when_used_not_while_vllm_imports(tmp_path: Path) -> None:
    # warm_child.READ_WHEN_USED: a launcher that imported vLLM with one K's folder forks every K's server
    launcher_env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / "k1"), "TRITON_CACHE_DIR": str(tmp_path / "t1")}
    run = subprocess.run(
        [sys.executable, "-c", READ_AFTER_IMPORTS, str(tmp_path / "k5"), str(tmp_path / "t5")],
        env=launcher_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    root, model_infos, triton_cache = json.loads(run.stdout.strip().splitlines()[-1])
    assert (root, model_infos, triton_cache) == (
        str(tmp_path / "k5"),
        str(tmp_path / "k5" / MODEL_INFOS),
        str(tmp_path / "t5"),
    )


SWEEPER_LIKE = """
import json, sys, time
from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess, WarmLaunchers
manifest = Manifest.load(sys.argv[1])
launchers = WarmLaunchers()
server = ServerProcess(manifest, launchers=launchers, log_path=sys.argv[2], ready_timeout_s=600)
server.start()
server.wait_ready()
print(json.dumps({"server": server.pid, "launchers": launchers.pids()}), flush=True)
time.sleep(600)
"""


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigkill_of_sweeper_leaves_no_launcher_server_or_engine(demo_manifest: Manifest, tmp_path: Path) -> None:
    sweeper_like = subprocess.Popen(
        [sys.executable, "-c", SWEEPER_LIKE, str(demo_manifest.source), str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = sweeper_like.stdout.readline()
        assert line, f"the sweeper-like process ended: {sweeper_like.wait()}"
        started = json.loads(line)
        family = _descendants(sweeper_like.pid)
        # the launchers (the API server's and those it started for the engine and worker), the server,
        # its engine core and worker
        assert set(started["launchers"]) <= family and started["server"] in family
        server_group = set(processes.group_members(started["server"]))
        assert len(server_group) >= 3, f"API server, engine core and worker expected in one group: {server_group}"
        assert len(family - server_group) >= 2  # at least the API server's launcher and one for the engine
    finally:
        os.kill(sweeper_like.pid, signal.SIGKILL)
        sweeper_like.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_alive(pid) for pid in family):
        time.sleep(0.5)
    assert [pid for pid in family if _alive(pid)] == []
    assert processes.group_members(started["server"]) == []
