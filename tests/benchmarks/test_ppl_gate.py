"""The PPL-gate benchmark's own arithmetic: the Wilson interval and resuming from the log."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def ppl_gate():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("ppl_gate_under_test", BENCHMARKS / "ppl_gate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_wilson_interval(ppl_gate) -> None:
    low, high = ppl_gate.wilson(0, 200)
    assert low == 0.0 and high == pytest.approx(0.01884, abs=1e-4)  # 3.84 / (200 + 3.84)
    low, high = ppl_gate.wilson(69, 199)
    assert (low, high) == (pytest.approx(0.2843, abs=1e-3), pytest.approx(0.4147, abs=1e-3))
    assert ppl_gate.wilson(5, 10)[0] == pytest.approx(1 - ppl_gate.wilson(5, 10)[1])


def test_a_cut_run_resumes_from_its_log(ppl_gate, tmp_path: Path, capsys) -> None:
    log = tmp_path / "trap.jsonl"
    argv = ["trap", "--landscapes", "0", "--seeds", "1", "--ppl-noises", "0.002",
            "--trials", "4", "--log", str(log)]  # fmt: skip
    assert ppl_gate.main(argv) == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 2  # without and with the known configurations
    first = capsys.readouterr()
    assert "running 2" in first.err
    # a run cut off mid-line, then the same command: nothing is run again
    with log.open("a") as handle:
        handle.write('{"task": {"kind": "tr')
    assert ppl_gate.main(argv) == 0
    again = capsys.readouterr()
    assert "2 of 2 studies in the log; running 0" in again.err
    assert again.out.split("\n\n")[0] == first.out.split("\n\n")[0]  # the same table
    results = [json.loads(line)["result"] for line in lines]
    assert all(r["trials"] == 4 and r["edge"] == 188 for r in results)
