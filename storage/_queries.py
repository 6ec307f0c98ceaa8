"""Questions asked of a stored study: trials by state, the best feasible one, the Pareto set."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

from storage._engine import (
    check_sqlite_file,
    create_engine,
    describe_error,
    normalize_url,
    optuna_storage,
    redact,
    sqlite_file,
)
from storage._store import TrialRecord, TrialStore
from storage._verification import VerificationRecord, latest_by_trial, verifications
from storage.errors import StorageError, StudyNotFoundError

logger = logging.getLogger(__name__)

# study-level settings, kept in Optuna's study user attributes (so the dashboard shows them)
STUDY_ATTR_PREFIX = "sweeper:"
# the Optuna user attribute of a trial whose TPS stands in for one never measured
# (stopped early over the PPL cap); samplers must not learn speed from it
TPS_IMPUTED_ATTR = "tps_imputed"
OPTUNA_STATES = ("COMPLETE", "FAIL", "RUNNING", "WAITING", "PRUNED")


def is_answer(record: TrialRecord) -> bool:
    """A measured, gate-passing trial: the only kind that can be the answer."""
    return (
        record.state == "complete"
        and bool(record.feasible)
        and record.tps is not None
        and record.ppl is not None
        and not record.tps_imputed
    )


def best_feasible(records: Iterable[TrialRecord]) -> TrialRecord | None:
    """The fastest trial that passed the gate (ties: the earlier trial)."""
    answers = [r for r in records if is_answer(r)]
    return max(answers, key=lambda r: (r.tps, -r.number)) if answers else None


def pareto_front(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Feasible trials no other feasible trial beats on both TPS (up) and PPL (down)."""
    # (trial, tps, ppl): is_answer checks both figures are set; the repeat tells the type checker
    answers = [(r, r.tps, r.ppl) for r in records if is_answer(r) and r.tps is not None and r.ppl is not None]
    front = [
        (r, tps, ppl)
        for r, tps, ppl in answers
        if not any(t >= tps and p <= ppl and (t > tps or p < ppl) for _, t, p in answers)
    ]
    return [r for r, _, _ in sorted(front, key=lambda point: (-point[1], point[2], point[0].number))]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyStatus:
    study_name: str
    url: str
    settings: Mapping[str, Any]
    counts: Mapping[str, int]
    best: TrialRecord | None
    pareto: tuple[TrialRecord, ...]
    trials: tuple[TrialRecord, ...]
    # the latest verification of each verified trial (sweeper verify), by trial number
    verifications: Mapping[int, VerificationRecord] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def brief(record: TrialRecord) -> dict[str, Any]:
            keys = ("number", "params", "tps", "ppl", "ppl_cap", "role")
            return {key: getattr(record, key) for key in keys}

        return {
            "study": self.study_name,
            "storage": self.url,
            "settings": dict(self.settings),
            "counts": dict(self.counts),
            "best": brief(self.best) if self.best else None,
            "pareto": [brief(r) for r in self.pareto],
            "verifications": {str(n): v.to_dict() for n, v in self.verifications.items()},
        }


# the table Optuna keeps its studies in: a database without it holds no study
STUDIES_TABLE = "studies"


def _existing_database(url: str | None, *, holds: str = STUDIES_TABLE, what: str = "study") -> str:
    """The normalized URL of a database that holds the table ``holds``; creates nothing.

    A SQLite file that does not exist, or a database without that table (an
    empty file, another program's database), is a ``StudyNotFoundError``:
    reading it must not make it a study database. ``what`` names what it lacks.
    """
    url = normalize_url(url)
    path = sqlite_file(url)
    if path is not None:
        if not path.exists():
            raise StudyNotFoundError(f"no study database at {path} (see --storage)")
        check_sqlite_file(path)  # a folder, or a file that is no SQLite database
        found = _sqlite_has_table(path, holds)
    else:
        engine = create_engine(url)
        try:
            found = sqlalchemy.inspect(engine).has_table(holds)
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise StorageError(f"cannot open study database {redact(url)}: {describe_error(exc)}") from None
        finally:
            engine.dispose()
    if found is False:
        raise StudyNotFoundError(f"{redact(url)} holds no {what} (see --storage)")
    return url


def _sqlite_has_table(path: Path, table: str) -> bool | None:
    """Does the SQLite file hold ``table``? None when it cannot be told this way.

    Only the schema is read, without our pragmas (WAL mode would be written into
    another program's database) and without creating the file. Not read-only: a
    read-only connection leaves a WAL database's -wal and -shm files behind, and an
    immutable one misses what a running study has not checkpointed yet.
    """
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)) as connection:
            row = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            return row.fetchone() is not None
    except sqlite3.Error:
        return None  # the regular open names the problem


def _all_study_names(storage: optuna.storages.RDBStorage, url: str) -> list[str]:
    try:
        return sorted(s.study_name for s in storage.get_all_studies())
    except Exception as exc:  # noqa: BLE001 - any Optuna/SQLAlchemy failure is a storage one
        raise StorageError(f"cannot read the studies of {redact(url)}: {describe_error(exc)}") from None


def study_names(url: str | None) -> list[str]:
    url = _existing_database(url)
    storage = optuna_storage(url)
    try:
        return _all_study_names(storage, url)
    finally:
        storage.remove_session()
        storage.engine.dispose()  # no connection left open: a WAL file goes with the last one


def study_status(url: str | None, study_name: str | None = None) -> StudyStatus:
    """Everything ``sweeper status`` shows, read from the study database."""
    url = _existing_database(url)
    storage = optuna_storage(url)
    try:
        names = _all_study_names(storage, url)
        if study_name is None:
            if len(names) != 1:
                listing = f"{len(names)} studies ({', '.join(names)})" if names else "no study"
                raise StudyNotFoundError(f"{redact(url)} holds {listing}: name one with --study")
            study_name = names[0]
        if study_name not in names:
            raise StudyNotFoundError(
                f"no study named {study_name!r} in {redact(url)} (studies: {', '.join(names) or 'none'})"
            )
        try:
            study = optuna.load_study(study_name=study_name, storage=storage)
            frozen = study.get_trials(deepcopy=False)
            settings = {
                key[len(STUDY_ATTR_PREFIX) :]: value
                for key, value in study.user_attrs.items()
                if key.startswith(STUDY_ATTR_PREFIX)
            }
        except Exception as exc:  # noqa: BLE001 - any Optuna/SQLAlchemy failure is a storage one
            raise StorageError(f"cannot read study {study_name!r} from {redact(url)}: {describe_error(exc)}") from exc
    finally:
        storage.remove_session()
        storage.engine.dispose()  # no connection left open: a WAL file goes with the last one
    store = TrialStore(url)
    try:
        records = store.records(study_name, phases=True)
    finally:
        store.close()
    counts: dict[str, int] = collections.Counter(t.state.name for t in frozen)
    counts = {state: counts.get(state, 0) for state in OPTUNA_STATES}
    counts["feasible"] = sum(1 for r in records if is_answer(r))
    counts["infeasible"] = sum(1 for r in records if r.state == "complete" and not r.feasible)
    return StudyStatus(
        study_name=study_name,
        url=redact(url),
        settings=settings,
        counts=counts,
        best=best_feasible(records),
        pareto=tuple(pareto_front(records)),
        trials=tuple(records),
        verifications=latest_by_trial(verifications(url, study_name)),
    )
