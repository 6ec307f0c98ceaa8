"""TrialStore: writes and reads our per-trial records (see ``_tables``)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy
from sqlalchemy import select, update
from sqlalchemy.orm import Session, selectinload

from storage._tables import PhaseRow, RequestRow, TableStore, TrialRow
from storage._values import as_utc, json_safe, utc_now
from storage.errors import StorageError

logger = logging.getLogger(__name__)

LOG_TAIL_MAX_CHARS = 64_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialOutcome:
    """What a finished trial left: the measurement or the error."""

    state: str  # complete | failed | interrupted | stale
    tps: float | None = None
    ppl: float | None = None
    ppl_cap: float | None = None
    feasible: bool | None = None
    ppl_reused_from: int | None = None
    early_stopped: bool = False
    tps_imputed: bool = False
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    phases: Sequence[tuple[str, float]] = ()
    requests: Sequence[Mapping[str, Any]] = ()
    manifest: Mapping[str, Any] | None = None
    log_tail: str | None = None
    server_token: str | None = None
    error_kind: str | None = None
    error_message: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as stored (phases and requests only when asked for)."""

    study_name: str
    number: int
    optuna_trial_id: int
    state: str
    role: str
    params: Mapping[str, Any]
    overrides: Mapping[str, str]
    manifest: Mapping[str, Any] | None
    tps: float | None
    ppl: float | None
    ppl_cap: float | None
    feasible: bool | None
    ppl_reused_from: int | None
    early_stopped: bool
    tps_imputed: bool
    extras: Mapping[str, Any]
    versions: Mapping[str, str]
    error_kind: str | None
    error_message: str | None
    log_tail: str | None
    server_token: str | None
    host: str
    pid: int
    started_at: datetime.datetime
    heartbeat_at: datetime.datetime
    finished_at: datetime.datetime | None
    phases: tuple[tuple[str, float], ...] = ()
    requests: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("started_at", "heartbeat_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


class TrialStore(TableStore):
    """Our trial tables on one database URL (created on first use)."""

    def _row(self, session: Session, study_name: str, number: int) -> TrialRow:
        row = session.scalar(select(TrialRow).where(TrialRow.study_name == study_name, TrialRow.number == number))
        if row is None:
            raise StorageError(f"study {study_name!r} has no recorded trial {number}")
        return row

    # -- writing ----------------------------------------------------------------

    def start_trial(
        self,
        *,
        study_name: str,
        number: int,
        optuna_trial_id: int,
        params: Mapping[str, Any],
        overrides: Mapping[str, str],
        role: str,
        host: str,
        pid: int,
        ppl_cap: float | None,
    ) -> None:
        with self._session() as session:
            session.add(
                TrialRow(
                    study_name=study_name,
                    number=number,
                    optuna_trial_id=optuna_trial_id,
                    state="running",
                    role=role,
                    params=json_safe(dict(params)),
                    overrides=dict(overrides),
                    ppl_cap=ppl_cap,
                    host=host,
                    pid=pid,
                )
            )

    def _row_id(self, session: Session, study_name: str, number: int) -> int:
        row_id = session.scalar(select(TrialRow.id).where(TrialRow.study_name == study_name, TrialRow.number == number))
        if row_id is None:
            raise StorageError(f"study {study_name!r} has no recorded trial {number}")
        return row_id

    def _update(self, session: Session, study_name: str, number: int, **values: Any) -> int:
        row_id = self._row_id(session, study_name, number)
        session.execute(update(TrialRow).where(TrialRow.id == row_id).values(**values))
        return row_id

    def update_running(self, study_name: str, number: int, **fields: Any) -> None:
        """Set ``server_token`` / ``manifest`` / ``log_tail`` / ``extras`` while the trial runs.

        The trial's extras are replaced by the measurement's when it finishes.
        """
        allowed = {"server_token", "manifest", "log_tail", "extras"}
        if set(fields) - allowed:
            raise ValueError(f"cannot update {sorted(set(fields) - allowed)} of a running trial")
        for name in ("manifest", "extras"):
            if name in fields:
                fields[name] = json_safe(fields[name])
        if "log_tail" in fields and fields["log_tail"] is not None:
            fields["log_tail"] = fields["log_tail"][-LOG_TAIL_MAX_CHARS:]
        with self._session() as session:
            self._update(session, study_name, number, **fields)

    def beat(self, study_name: str, number: int) -> None:
        """The worker running this trial is alive."""
        with self._session() as session:
            self._update(session, study_name, number, heartbeat_at=utc_now())

    def add_phase(self, study_name: str, number: int, name: str, seconds: float) -> None:
        with self._session() as session:
            row_id = self._row_id(session, study_name, number)
            self._add_phases(session, row_id, [(name, seconds)])

    @staticmethod
    def _add_phases(session: Session, row_id: int, phases: Sequence[tuple[str, float]]) -> None:
        start = session.scalars(
            select(sqlalchemy.func.count()).select_from(PhaseRow).where(PhaseRow.trial_row_id == row_id)
        ).one()
        session.add_all(
            PhaseRow(trial_row_id=row_id, position=start + i, name=name, seconds=float(seconds))
            for i, (name, seconds) in enumerate(phases)
        )

    def finish_trial(self, study_name: str, number: int, outcome: TrialOutcome) -> None:
        values: dict[str, Any] = {
            key: getattr(outcome, key)
            for key in (
                "state",
                "tps",
                "ppl",
                "ppl_cap",
                "feasible",
                "ppl_reused_from",
                "early_stopped",
                "tps_imputed",
                "error_kind",
                "error_message",
            )
        }
        values.update(
            finished_at=utc_now(),
            extras=json_safe(dict(outcome.extras)),
            versions=dict(outcome.versions),
        )
        if outcome.manifest is not None:
            values["manifest"] = json_safe(dict(outcome.manifest))
        if outcome.log_tail is not None:
            values["log_tail"] = outcome.log_tail[-LOG_TAIL_MAX_CHARS:]
        if outcome.server_token is not None:
            values["server_token"] = outcome.server_token
        with self._session() as session:
            row_id = self._update(session, study_name, number, **values)
            if outcome.phases:
                self._add_phases(session, row_id, outcome.phases)
            session.add_all(
                RequestRow(
                    trial_row_id=row_id,
                    position=position,
                    kind=str(data.get("kind", "")),
                    data=json_safe(dict(data)),
                )
                for position, data in enumerate(outcome.requests)
            )

    # -- reading ----------------------------------------------------------------

    def records(
        self,
        study_name: str,
        *,
        states: Sequence[str] | None = None,
        numbers: Sequence[int] | None = None,
        details: bool = False,
        phases: bool = False,
    ) -> list[TrialRecord]:
        """The study's trials in order; ``details``: with phases and per-request rows,
        ``phases``: with the phases alone (what the time by phase needs)."""
        query = select(TrialRow).where(TrialRow.study_name == study_name)
        if states is not None:
            query = query.where(TrialRow.state.in_(list(states)))
        if numbers is not None:
            query = query.where(TrialRow.number.in_(list(numbers)))
        if details:
            query = query.options(selectinload(TrialRow.phases), selectinload(TrialRow.requests))
        elif phases:
            query = query.options(selectinload(TrialRow.phases))
        with self._session() as session:
            rows = session.scalars(query.order_by(TrialRow.number)).all()
            return [_record(row, details=details, phases=phases) for row in rows]

    def record(self, study_name: str, number: int, *, details: bool = True) -> TrialRecord:
        """One trial, with its phases and per-request rows unless ``details`` is False."""
        with self._session() as session:
            return _record(self._row(session, study_name, number), details=details)

    def count(self, study_name: str, states: Sequence[str]) -> int:
        with self._session() as session:
            return session.scalars(
                select(sqlalchemy.func.count())
                .select_from(TrialRow)
                .where(TrialRow.study_name == study_name, TrialRow.state.in_(list(states)))
            ).one()

    def study_names(self) -> list[str]:
        with self._session() as session:
            return list(session.scalars(select(TrialRow.study_name).distinct()).all())


def _record(row: TrialRow, *, details: bool, phases: bool = False) -> TrialRecord:
    return TrialRecord(
        study_name=row.study_name,
        number=row.number,
        optuna_trial_id=row.optuna_trial_id,
        state=row.state,
        role=row.role,
        params=dict(row.params or {}),
        overrides=dict(row.overrides or {}),
        manifest=row.manifest,
        tps=row.tps,
        ppl=row.ppl,
        ppl_cap=row.ppl_cap,
        feasible=row.feasible,
        ppl_reused_from=row.ppl_reused_from,
        early_stopped=bool(row.early_stopped),
        tps_imputed=bool(row.tps_imputed),
        extras=dict(row.extras or {}),
        versions=dict(row.versions or {}),
        error_kind=row.error_kind,
        error_message=row.error_message,
        log_tail=row.log_tail,
        server_token=row.server_token,
        host=row.host,
        pid=row.pid,
        started_at=as_utc(row.started_at),
        heartbeat_at=as_utc(row.heartbeat_at),
        finished_at=as_utc(row.finished_at),
        phases=tuple((p.name, p.seconds) for p in row.phases) if details or phases else (),
        requests=tuple(dict(r.data) for r in row.requests) if details else (),
    )
