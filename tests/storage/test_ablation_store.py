"""Ablation records on SQLite and PostgreSQL: written server by server, read back, resumed by name."""

from __future__ import annotations

import math

import pytest

from storage import ABLATION_FINISHED, ABLATION_RUNNING, AblationServer, AblationStore, ClosingServer, stored_ablation
from storage.errors import StorageError

SWITCHES = [{"key": "ENFORCE_EAGER", "subject": "1", "reference": "0", "manifest_value": "1"}]
SETTINGS = {"rounds": 2, "block_size": 4, "confidence": 0.95}


def _server(round_number: int, arm: int | None, **fields) -> AblationServer:
    return AblationServer(
        round=round_number, block=0, arm=arm, overrides={} if arm is None else {"ENFORCE_EAGER": "0"}, **fields
    )


def test_an_ablation_round_trips_and_resumes(storage_url: str) -> None:
    with AblationStore(storage_url) as store:
        record = store.start(
            name="abl", mode="leave-one-out", manifest={"name": "m"}, switches=SWITCHES, settings=SETTINGS
        )
        assert record.status == ABLATION_RUNNING and record.servers == ()
        scores = [{"id": "r1", "nll": 12.5, "tokens": 10}, {"id": "r2", "nll": 7.25, "tokens": 6}]
        store.add_server(
            record.id,
            _server(
                1, None, state="complete", tps=101.5, ppl=2.1, ppl_scores=scores, phases={"tps": 13.0}, seconds=60.0
            ),
        )
        store.add_server(
            record.id,
            _server(1, 0, state="failed", ppl=math.inf, error_kind="oom", error_message="out of memory", seconds=9.0),
        )
        with pytest.raises(StorageError, match="stored already"):
            store.add_server(record.id, _server(1, 0, state="complete", tps=1.0))
    with AblationStore(storage_url) as store:  # a new process: the same ablation goes on
        again = store.start(
            name="abl", mode="leave-one-out", manifest={"name": "m"}, switches=SWITCHES, settings=SETTINGS
        )
        assert again.id == record.id
        assert again.done_slots == {(1, 0, None), (1, 0, 0)}
        base, arm = again.servers
        assert (base.tps, base.ppl, list(base.ppl_scores), dict(base.phases)) == (101.5, 2.1, scores, {"tps": 13.0})
        assert (arm.state, arm.tps, arm.ppl, arm.error_kind) == ("failed", None, None, "oom")
        assert dict(arm.overrides) == {"ENFORCE_EAGER": "0"}
        store.finish(again.id, status=ABLATION_FINISHED, verdicts=[{"switch": "ENFORCE_EAGER=1", "verdict": "hurts"}])
        done = store.find("abl")
        assert done.status == ABLATION_FINISHED and done.verdicts[0]["verdict"] == "hurts"
        assert done.finished_at is not None and store.names() == ["abl"]
        assert store.find("other") is None


def test_the_closing_race_and_the_run_options_round_trip(storage_url: str) -> None:
    fidelity = {"compared": 4, "identical": 3, "divergences": [], "duration_s": 0.5}
    with AblationStore(storage_url) as store:
        record = store.start(
            name="abl",
            mode="leave-one-out",
            manifest={},
            switches=SWITCHES,
            settings=SETTINGS,
            run_options={"allow_output_change": True},
        )
        store.add_closing(
            record.id,
            ClosingServer(
                changes={"ENFORCE_EAGER": "0"},
                pair=1,
                side="exported",
                state="complete",
                tps=880.5,
                fidelity=fidelity,
                seconds=48.0,
            ),
        )
        store.add_closing(
            record.id,
            ClosingServer(
                changes={"ENFORCE_EAGER": "0"},
                pair=1,
                side="original",
                state="failed",
                error_kind="oom",
                error_message="out of memory",
                tps=math.nan,
            ),
        )
        assert store.record(record.id).settings["run_options"] == {"allow_output_change": True}
    with AblationStore(storage_url) as store:  # resumed without the option: the settings still match
        again = store.start(name="abl", mode="leave-one-out", manifest={}, switches=SWITCHES, settings=SETTINGS)
        assert again.settings == {**SETTINGS, "run_options": {}}
        exported, original = again.closing_for({"ENFORCE_EAGER": "0"})
        assert (exported.slot, exported.tps, dict(exported.fidelity), exported.seconds) == (
            (1, "exported"),
            880.5,
            fidelity,
            48.0,
        )
        assert (original.state, original.tps, original.error_kind) == ("failed", None, "oom")
        assert again.closing_for({"ENFORCE_EAGER": "1"}) == ()


def test_the_same_name_with_other_switches_is_refused(tmp_path) -> None:
    with AblationStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        store.start(name="abl", mode="leave-one-out", manifest={}, switches=SWITCHES, settings=SETTINGS)
        with pytest.raises(StorageError, match="other switches, settings"):
            store.start(name="abl", mode="leave-one-out", manifest={}, switches=[], settings={"rounds": 3})
        with pytest.raises(ValueError):
            store.finish(1, status="done", verdicts=None)


def test_stored_ablation_never_creates_a_database_and_names_what_is_stored(tmp_path) -> None:
    from storage._queries import StudyNotFoundError

    missing = tmp_path / "none.db"
    with pytest.raises(StudyNotFoundError, match="no study database"):
        stored_ablation(f"sqlite:///{missing}", "abl")
    assert not missing.exists()
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with AblationStore(url) as store:
        store.start(name="abl", mode="leave-one-out", manifest={}, switches=SWITCHES, settings=SETTINGS)
    assert stored_ablation(url, "abl").name == "abl"
    with pytest.raises(StudyNotFoundError, match=r"no ablation 'other' .*\(stored: abl\)"):
        stored_ablation(url, "other")
