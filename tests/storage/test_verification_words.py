"""A verification's status and control are enums in code and the same words in the database as
before they were: an older file reads, and a file written now reads with older code."""

from __future__ import annotations

import sqlite3

import pytest

from storage import Control, VerificationRun, VerificationStatus, VerificationStore


def stored_words(path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT status, control FROM sweeper_verifications ORDER BY id").fetchall()


def test_the_words_stored_are_the_enums_values(tmp_path, start_verification) -> None:
    path = tmp_path / "v.db"
    with VerificationStore(f"sqlite:///{path}") as store:
        measured = start_verification(store, control=Control.MEASURED)
        store.add_run(measured, VerificationRun(repeat=0, state="complete", tps=100.0, ppl=2.2))
        store.finish(measured, status=VerificationStatus.VERIFIED, reason="ok", median_tps=100.0, max_ppl=2.2)
        is_base = start_verification(store, control=Control.IS_BASE)
        store.finish(is_base, status=VerificationStatus.FAILED, reason="slow", median_tps=80.0, max_ppl=2.2)
        off = start_verification(store, control=Control.OFF)
        store.finish(off, status=VerificationStatus.INTERRUPTED, reason="interrupted", median_tps=None, max_ppl=None)
        running = start_verification(store, control=None)
    assert stored_words(path) == [
        ("verified", "measured"),
        ("failed", "is-base"),
        ("interrupted", "off"),
        ("running", None),
    ]
    with VerificationStore(f"sqlite:///{path}") as store:
        store.resume(
            off, tuned_tps=100.0, tolerance=0.05, repeats=1, control=Control.MEASURED, claimed_speedup=True, noise=None
        )
        records = {r.id: r for r in store.records("s")}
    assert stored_words(path)[2] == ("running", "measured")
    assert records[measured].status is VerificationStatus.VERIFIED and records[measured].control is Control.MEASURED
    assert records[is_base].status is VerificationStatus.FAILED and records[is_base].control is Control.IS_BASE
    assert records[off].status is VerificationStatus.RUNNING and records[running].control is None
    assert [r.id for r in records.values() if r.verified] == [measured]
    assert [r.id for r in records.values() if r.finished] == [measured, is_base]
    assert f"{records[is_base].status} {records[is_base].control}" == "failed is-base"
    assert records[measured].to_dict()["status"] == "verified"


def test_words_are_read_as_enums_and_unknown_ones_refused(tmp_path, start_verification) -> None:
    path = tmp_path / "v.db"
    with VerificationStore(f"sqlite:///{path}") as store:
        vid = start_verification(store, control="is-base")  # the word itself, as older callers passed it
        store.finish(vid, status="failed", reason="slow", median_tps=80.0, max_ppl=2.2)
        with pytest.raises(ValueError):
            start_verification(store, control="sometimes")
        with pytest.raises(ValueError):
            store.finish(vid, status="passed", reason="", median_tps=None, max_ppl=None)
        (record,) = store.records("s")
    assert stored_words(path) == [("failed", "is-base")]
    assert record.status is VerificationStatus.FAILED and record.control is Control.IS_BASE
