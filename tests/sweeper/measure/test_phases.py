"""A study's server time by phase: sums, shares, order and the text status and the report print."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from storage import TrialRecord
from storage.testing import trial_record
from sweeper.measure import duration_text, phase_headline, phase_rows, start_seconds, time_by_phase

NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc)


def record(number: int, phases: tuple[tuple[str, float], ...], **extras) -> TrialRecord:
    return trial_record(
        number,
        optuna_trial_id=number,
        role="trial",
        ppl=1.0,
        ppl_cap=2.0,
        extras=extras,
        started_at=NOW,
        heartbeat_at=NOW,
        finished_at=NOW,
        phases=phases,
    )


@dataclasses.dataclass
class Run:
    phases: dict


@dataclasses.dataclass
class Verification:
    runs: tuple


SPLIT = (("spawn", 20.0), ("engine init", 50.0), ("api ready", 5.0))
TRIALS = [
    record(0, (*SPLIT, ("ppl", 4.0), ("warmup", 1.0), ("tps", 10.0), ("teardown", 2.0)), compile_s=30.0),
    # an older trial, its start stored whole; a retried start counts twice
    record(1, (("start", 40.0), ("start", 60.0), ("ppl", 2.0), ("teardown", 3.0))),
    record(2, ()),  # queued: no server yet
]
VERIFY = [Verification(runs=(Run({"start": 70.0, "tps": 8.0, "teardown": 2.0}),))]


def test_the_phases_are_summed_in_the_order_a_server_lives_them() -> None:
    time = time_by_phase(TRIALS, VERIFY)
    assert [p.name for p in time.phases] == [
        "start",
        "spawn",
        "engine init",
        "api ready",
        "ppl",
        "warmup",
        "tps",
        "teardown",
    ]
    seconds = {p.name: p.seconds for p in time.phases}
    assert seconds == {
        "start": 170.0,
        "spawn": 20.0,
        "engine init": 50.0,
        "api ready": 5.0,
        "ppl": 6.0,
        "warmup": 1.0,
        "tps": 18.0,
        "teardown": 7.0,
    }
    total = 20 + 50 + 5 + 4 + 1 + 10 + 2 + 40 + 60 + 2 + 3 + 70 + 8 + 2
    assert time.total_s == pytest.approx(total)
    assert (time.servers, time.verification_servers, time.compile_s) == (3, 1, 30.0)
    assert time.starting_share == pytest.approx((20 + 50 + 5 + 40 + 60 + 70) / total)
    assert time.measuring_share == pytest.approx((4 + 1 + 10 + 2 + 8) / total)
    assert sum(p.share for p in time.phases) == pytest.approx(1.0)
    assert {p.name: p.count for p in time.phases}["start"] == 3
    assert start_seconds(dict(SPLIT)) == 75.0 and start_seconds(TRIALS[1].phases) == 100.0


def test_the_text_names_the_share_spent_measuring() -> None:
    time = time_by_phase(TRIALS, VERIFY)
    assert phase_headline(time) == (
        "4 min 37 s of server time in 3 servers (1 of them verifying): 88.4 % starting, 9.0 % measuring"
    )
    rows = {row[0]: row[1:] for row in phase_rows(time)}
    assert rows["engine init (compile 30 s)"] == ["50 s", "18.1 %", "50.0 s"]
    assert rows["start"] == ["2 min 50 s", "61.4 %", "56.7 s"]
    assert rows["stop"][0] == "7 s" and rows["PPL"][2] == "3.0 s"
    assert time_by_phase([TRIALS[2]]).phases == ()
    assert [duration_text(s) for s in (42.4, 343, 7500)] == ["42 s", "5 min 43 s", "2 h 05 min"]


def test_the_split_start_its_warm_servers_and_compile_cache_are_counted() -> None:
    split = (("api imports", 0.0), ("engine start", 2.0), ("compile", 3.0), ("graph capture", 1.0), ("api ready", 1.5))
    trials = [
        record(0, (*split, ("tps", 10.0)), compile_s=3.0, server_start="warm", compile_cache_hit=True),
        record(
            1,
            (("api imports", 20.0), ("engine start", 25.0), ("compile", 40.0), ("api ready", 8.0)),
            compile_s=38.0,
            server_start="fresh",
            compile_cache_hit=False,
        ),
        record(2, (("api imports", 0.0), ("engine start", 3.0), ("api ready", 1.0)), server_start="warm"),
    ]
    time = time_by_phase(trials)
    assert [p.name for p in time.phases] == [
        "api imports",
        "engine start",
        "compile",
        "graph capture",
        "api ready",
        "tps",
    ]
    assert (time.warm_servers, time.compile_hits, time.compile_misses, time.compile_s) == (2, 1, 1, 41.0)
    assert time.starting_s == pytest.approx(0 + 2 + 3 + 1 + 1.5 + 20 + 25 + 40 + 8 + 0 + 3 + 1)
    assert phase_headline(time).startswith(f"{duration_text(114.5)} of server time in 3 servers (2 started warm):")
    rows = {row[0]: row[1:] for row in phase_rows(time)}
    assert rows["compile (compile 41 s, cache: 1 hit, 1 miss)"][0] == "43 s"
    assert rows["API imports"][2] == "6.7 s"  # 20 s over the 3 servers that went through it
    assert time.to_dict()["warm_servers"] == 2
