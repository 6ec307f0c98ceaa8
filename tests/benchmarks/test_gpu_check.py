"""The GPU check script's logic that needs no GPU: parts, spreads, the results file and its summary."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_parts_are_checked_and_keep_their_order(gpu_check) -> None:
    assert gpu_check.parse_parts("noise, serve") == ("noise", "serve")
    with pytest.raises(SystemExit, match="unknown part"):
        gpu_check.parse_parts("serve,warp")
    assert gpu_check.parse_ints("1,8,32", "--top-k") == (1, 8, 32)
    with pytest.raises(SystemExit, match="--top-k: expected integers"):
        gpu_check.parse_ints("1,eight", "--top-k")


def test_spread_figures(gpu_check) -> None:
    spread = gpu_check.Spread((745.0, 627.0, 700.0))
    mean = (745.0 + 627.0 + 700.0) / 3
    assert spread.mean == pytest.approx(mean)
    assert spread.relative_range == pytest.approx((745.0 - 627.0) / mean)
    assert spread.cv == pytest.approx(statistics.stdev([745.0, 627.0, 700.0]) / mean)
    assert gpu_check.Spread((5.0,)).cv is None


def test_each_figure_is_written_at_once_and_summarized(gpu_check, tmp_path: Path) -> None:
    recorder = gpu_check.Recorder(tmp_path)
    recorder.write("noise", server=0, tps=700.0, sizes=[8, 128])
    assert json.loads(recorder.path.read_text())["tps"] == 700.0  # on disk before the next figure
    recorder.write("noise", server=1, tps=630.0, sizes=[8, 128])
    recorder.write("ctk", top_k=1, acceptance_length=2.0)
    recorder.write("ctk", top_k=32, acceptance_length=2.67)
    lines = gpu_check.summary_lines(gpu_check.read_records(recorder.path))
    assert "noise [8, 128]: 2 servers, mean 665.0 tok/s, range 10.5 %, cv 7.4 %" in lines
    assert "ctk 1: acceptance length 2.00" in lines and "ctk 32: acceptance length 2.67" in lines


def test_info_part_runs_without_a_gpu_and_a_failed_part_is_recorded(gpu_check, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_check, "RUNNERS", {"serve": lambda *args: 1 / 0})
    gpu_check.main(["--only", "info,serve", "--out", str(tmp_path)])
    records = gpu_check.read_records(tmp_path / "gpu_check.jsonl")
    info = next(r for r in records if r["part"] == "info")
    assert info["sweeper"] and "python" in info
    error = next(r for r in records if r["part"] == "error")
    assert error["failed_part"] == "serve" and "ZeroDivisionError" in error["error"]
    assert [r["timed_part"] for r in records if r["part"] == "timing"] == ["info", "serve"]
