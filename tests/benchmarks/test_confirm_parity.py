"""The confirming run's verdict (``benchmarks/confirm_parity.py``), on rounds from the record.

The whole-run files are laid out as ``tps_vs_harness_client.py --out`` writes them, with the
TPS of real rounds on record (benchmarks/results/gpu-parity-rounds.csv) and the hosts the
probe saw before those sessions' rounds (docs/measurement.md); the per-request files as
``tps_client_per_request.py --json`` writes them. The intervals are checked against scipy.
"""

from __future__ import annotations

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RECORD = BENCHMARKS / "results" / "gpu-parity-rounds.csv"

# the probe before the rounds, as the two sessions of 2026-12-03 stored it (docs/measurement.md)
QUIET_HOST = {
    "seconds": 89,
    "median_cpu_ms": 0.768,
    "low_quartile_cpu_ms": 0.760,
    "high_quartile_cpu_ms": 0.778,
    "quiet": True,
}
BUSY_HOST = {
    "seconds": 153,
    "median_cpu_ms": 1.571,
    "low_quartile_cpu_ms": 1.183,
    "high_quartile_cpu_ms": 1.915,
    "quiet": False,
}


@pytest.fixture(scope="module")
def confirm(load_benchmark):
    return load_benchmark("confirm_parity")


def _rounds_on_record(run: str) -> list[tuple[float, float]]:
    with RECORD.open(newline="") as handle:
        return [
            (float(r["harness_tps"]), float(r["ours_tps"]))
            for r in csv.DictReader(handle)
            if r["run"] == run and r["size"] == "128x512"
        ]


def _t_interval(ratios: list[float]) -> tuple[float, float, float]:
    logs = np.log(ratios)
    half = student_t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return math.exp(logs.mean()), math.exp(logs.mean() - half), math.exp(logs.mean() + half)


def _whole_file(
    path: Path,
    rounds: list[tuple[float, float]],
    host: dict | None,
    *,
    ours_tokens: int = 65536,
    same_order: bool = True,
) -> Path:
    def side(tps: float, tokens: int) -> dict:
        # the fields the run's own summary reads (tps_vs_harness_client.size_summary)
        return {
            "ok": True,
            "tps": tps,
            "output_lens": [tokens // 128] * 128,
            "input_lens": [40] * 128,
            "server": {"requests": 132, "e2e_s": 58.0, "decode_s": 57.0},
        }

    records = []
    for number, (harness, ours) in enumerate(rounds):
        order = ["harness", "ours"] if number % 2 == 0 else ["ours", "harness"]
        records.append(
            {
                "round": number,
                "first": order[0],
                "order": order,
                "harness": side(harness, 65536),
                "ours": {**side(ours, ours_tokens), "same_order": same_order},
            }
        )
    entry = {"rounds": records, **({"host_before": host} if host else {})}
    path.write_text(json.dumps({"began": "2026-12-03 00:40:00", "sizes": {"128x512": entry}}))
    return path


def _per_request_file(path: Path, ratios: list[float], output_tokens: int = 512) -> Path:
    """One request of each side a prompt; ours's latency is the harness's times the prompt's ratio."""
    rows = []
    for number, ratio in enumerate(ratios):
        harness = 0.44 + 0.01 * (number % 7)
        for place, (side, latency) in enumerate((("harness", harness), ("ours", harness * ratio))):
            rows.append(
                {
                    "pass": 0,
                    "prompt_id": f"p{number}",
                    "side": side,
                    "place": place,
                    "ok": True,
                    "latency_s": latency,
                    "output_tokens": output_tokens,
                }
            )
    path.write_text(json.dumps(rows))
    return path


def test_the_quiet_session_on_record_confirms_its_whole_runs_but_had_no_per_request_pass(confirm, tmp_path) -> None:
    rounds = _rounds_on_record("2026-12-03T00:40Z")
    assert len(rounds) == 7
    verdict = confirm.judge(_whole_file(tmp_path / "whole.json", rounds, QUIET_HOST), None)
    mean, low, high = _t_interval([o / h for h, o in rounds])
    assert verdict.whole.count == 7
    assert verdict.whole.geometric_mean == pytest.approx(mean, rel=1e-9)
    assert (verdict.whole.low, verdict.whole.high) == (pytest.approx(low, rel=1e-6), pytest.approx(high, rel=1e-6))
    assert 0.98 <= low and high <= 1.02  # the record itself: 0.999 (0.990-1.008)
    assert verdict.code == confirm.NO_PER_REQUEST
    assert "done-when is not met" in verdict.line


def test_with_a_per_request_pass_at_the_size_it_confirms(confirm, tmp_path) -> None:
    rng = random.Random(19)
    latency_ratios = [math.exp(rng.gauss(0.0, 0.03)) for _ in range(128)]
    verdict = confirm.judge(
        _whole_file(tmp_path / "whole.json", _rounds_on_record("2026-12-03T00:40Z"), QUIET_HOST),
        _per_request_file(tmp_path / "per-request.json", latency_ratios),
    )
    assert verdict.code == confirm.CONFIRMED
    assert (verdict.per_request.prompts, verdict.per_request.output_tokens) == (128, 512)
    # TPS ours / harness is the inverse of the latency ratio's geometric mean
    assert verdict.per_request.tps_ratio == pytest.approx(math.exp(-np.log(latency_ratios).mean()), rel=1e-9)
    # the bootstrap interval is close to the t interval of the same log ratios (inverted)
    _, t_low, t_high = _t_interval([1 / r for r in latency_ratios])
    half = math.log(t_high / t_low) / 2
    assert abs(math.log(verdict.per_request.low / t_low)) < 0.2 * half
    assert abs(math.log(verdict.per_request.high / t_high)) < 0.2 * half


def test_a_per_request_pass_of_another_size_does_not_count(confirm, tmp_path) -> None:
    verdict = confirm.judge(
        _whole_file(tmp_path / "whole.json", _rounds_on_record("2026-12-03T00:40Z"), QUIET_HOST),
        _per_request_file(tmp_path / "per-request.json", [1.0, 1.01] * 24, 128),
    )
    assert verdict.code == confirm.NO_PER_REQUEST and verdict.per_request is None


def test_a_busy_host_before_the_rounds_is_not_a_confirming_run(confirm, tmp_path) -> None:
    rounds = _rounds_on_record("2026-12-03T01:04Z")
    verdict = confirm.judge(_whole_file(tmp_path / "whole.json", rounds, BUSY_HOST), None)
    assert verdict.code == confirm.NOT_A_CONFIRMING_RUN
    assert "busy" in verdict.line and "1.571" in verdict.line
    # the cut is the fixed one, not the flag the file stored
    relabelled = {**BUSY_HOST, "median_cpu_ms": 1.2, "quiet": True}
    verdict = confirm.judge(_whole_file(tmp_path / "whole.json", rounds, relabelled), None)
    assert verdict.code == confirm.NOT_A_CONFIRMING_RUN
    verdict = confirm.judge(_whole_file(tmp_path / "whole.json", rounds, None), None)
    assert verdict.code == confirm.NOT_A_CONFIRMING_RUN and "no probe" in verdict.line


def test_a_wide_interval_on_a_quiet_host_does_not_confirm(confirm, tmp_path) -> None:
    rounds = _rounds_on_record("2026-12-02T21:23Z")  # 1.022 (0.947-1.103) on record
    per_request = _per_request_file(tmp_path / "per-request.json", [1.0] * 128)
    verdict = confirm.judge(_whole_file(tmp_path / "whole.json", rounds, QUIET_HOST), per_request)
    mean, low, high = _t_interval([o / h for h, o in rounds])
    assert low < 0.98 or high > 1.02
    assert verdict.code == confirm.NOT_CONFIRMED
    assert f"{low:.4f} to {high:.4f}" in verdict.line


def test_unlike_pairs_and_a_single_pair_do_not_confirm(confirm, tmp_path) -> None:
    rounds = _rounds_on_record("2026-12-03T00:40Z")
    verdict = confirm.judge(_whole_file(tmp_path / "a.json", rounds, QUIET_HOST, ours_tokens=65280), None)
    assert verdict.code == confirm.NOT_CONFIRMED and "same number of tokens" in verdict.line
    verdict = confirm.judge(_whole_file(tmp_path / "b.json", rounds, QUIET_HOST, same_order=False), None)
    assert verdict.code == confirm.NOT_CONFIRMED and "order" in verdict.line
    verdict = confirm.judge(_whole_file(tmp_path / "c.json", rounds[:1], QUIET_HOST), None)
    assert verdict.code == confirm.NOT_CONFIRMED and "1 complete pair" in verdict.line


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "confirm_parity.py"), *args], capture_output=True, text=True, timeout=60
    )


def test_the_command_prints_the_figures_and_exits_with_the_verdicts_code(tmp_path) -> None:
    whole = _whole_file(tmp_path / "whole.json", _rounds_on_record("2026-12-03T00:40Z"), QUIET_HOST)
    per_request = _per_request_file(tmp_path / "per-request.json", [0.999, 1.001] * 64)
    done = _cli(str(whole), "--per-request", str(per_request))
    assert done.returncode == 0, done.stderr
    assert "a quiet host" in done.stdout and "7 pairs" in done.stdout and "128 prompts x 512 tokens" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("verdict: confirmed")
    assert _cli(str(whole)).returncode == 4


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("{not json", "not a readable JSON file"),
        (json.dumps({"sizes": {"48x128": {"rounds": []}}}), "no whole runs at 128x512"),
        (json.dumps({"sizes": {"128x512": {"rounds": [], "host_before": {"seconds": 3}}}}), "host_before lacks"),
        (json.dumps({"sizes": ["128x512"]}), "no whole runs at 128x512"),
        (
            json.dumps(
                {
                    "sizes": {
                        "128x512": {
                            "host_before": QUIET_HOST,
                            "rounds": [{"ours": {"ok": True}, "harness": {"ok": True}}],
                        }
                    }
                }
            ),
            "a round without its figures",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, message) -> None:
    path = tmp_path / "whole.json"
    if content is not None:
        path.write_text(content)
    done = _cli(str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr and str(path) in done.stderr


def test_a_per_request_file_that_is_not_a_list_is_refused(tmp_path) -> None:
    whole = _whole_file(tmp_path / "whole.json", _rounds_on_record("2026-12-03T00:40Z"), QUIET_HOST)
    (tmp_path / "pr.json").write_text(json.dumps({"rows": []}))
    done = _cli(str(whole), "--per-request", str(tmp_path / "pr.json"))
    assert done.returncode == 2 and "not a per-request file" in done.stderr
    (tmp_path / "pr.json").write_text(json.dumps([{"side": "ours", "ok": True}]))
    done = _cli(str(whole), "--per-request", str(tmp_path / "pr.json"))
    assert done.returncode == 2 and "a request without its figures" in done.stderr and "Traceback" not in done.stderr
