"""Ablation records: which switches of a manifest help, measured server by server.

``sweeper_ablations`` has one row per ablation (its name, mode, the
switches and settings it was started with, the redacted manifest, and the
verdicts once it ends), ``sweeper_ablation_servers`` one row per fresh
server of its schedule (round, block, arm, the env overrides, TPS, PPL
with its per-record scores, greedy fidelity, or how it failed) and
``sweeper_ablation_closing`` one row per fresh server of the closing race
(the manifest the verdicts export against the original: which pair, which
side, the exported changes it was raced for, TPS and fidelity). A server's
row is written as soon as it ends, so an interrupted ablation keeps every
server it measured and a later run with the same name goes on from the
next slot of the schedule, or the next server of the closing race.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy
from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship, selectinload

from storage._engine import redact
from storage._queries import StudyNotFoundError, _existing_database
from storage._tables import Base, TableStore, mapped_tables
from storage._values import as_utc, finite_float, json_safe, utc_now
from storage.errors import StorageError

ABLATION_RUNNING = "running"
ABLATION_FINISHED = "finished"
ABLATION_INTERRUPTED = "interrupted"
ABLATION_STATUSES = (ABLATION_RUNNING, ABLATION_FINISHED, ABLATION_INTERRUPTED)
RUN_OPTIONS = "run_options"  # the key in an ablation's settings that a resumed run may change


class AblationRow(Base):
    __tablename__ = "sweeper_ablations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(512), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(32))
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # redacted
    switches: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    verdicts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    servers: Mapped[list[AblationServerRow]] = relationship(
        back_populates="ablation", order_by="AblationServerRow.id", cascade="all, delete-orphan"
    )
    closing: Mapped[list[ClosingServerRow]] = relationship(
        back_populates="ablation", order_by="ClosingServerRow.id", cascade="all, delete-orphan"
    )


class AblationServerRow(Base):
    __tablename__ = "sweeper_ablation_servers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ablation_id: Mapped[int] = mapped_column(ForeignKey("sweeper_ablations.id", ondelete="CASCADE"), index=True)
    round: Mapped[int] = mapped_column(Integer)
    block: Mapped[int] = mapped_column(Integer)
    arm: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: the base
    overrides: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16))  # complete | failed
    tps: Mapped[float | None] = mapped_column(Float, nullable=True)
    ppl: Mapped[float | None] = mapped_column(Float, nullable=True)
    ppl_scores: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    fidelity: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error_kind: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    phases: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    log_tail: Mapped[str | None] = mapped_column(Text, nullable=True)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    finished_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=utc_now)

    ablation: Mapped[AblationRow] = relationship(back_populates="servers")


class ClosingServerRow(Base):
    __tablename__ = "sweeper_ablation_closing"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ablation_id: Mapped[int] = mapped_column(ForeignKey("sweeper_ablations.id", ondelete="CASCADE"), index=True)
    changes: Mapped[dict[str, str | None]] = mapped_column(JSON, default=dict)  # exported vs original env
    pair: Mapped[int] = mapped_column(Integer)
    side: Mapped[str] = mapped_column(String(16))  # exported | original
    state: Mapped[str] = mapped_column(String(16))  # complete | failed
    tps: Mapped[float | None] = mapped_column(Float, nullable=True)
    fidelity: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error_kind: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    finished_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=utc_now)

    ablation: Mapped[AblationRow] = relationship(back_populates="closing")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationServer:
    """One fresh server of an ablation's schedule and what it measured (``state`` failed: ``error_kind``)."""

    round: int
    block: int
    arm: int | None
    overrides: Mapping[str, str]
    state: str
    tps: float | None = None
    ppl: float | None = None
    ppl_scores: Sequence[Mapping[str, Any]] = ()
    fidelity: Mapping[str, Any] | None = None
    error_kind: str | None = None
    error_message: str | None = None
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    log_tail: str | None = None
    seconds: float = 0.0
    finished_at: datetime.datetime | None = None

    @property
    def slot(self) -> tuple[int, int, int | None]:
        return (self.round, self.block, self.arm)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["finished_at"] = self.finished_at.isoformat() if self.finished_at else None
        return json_safe(data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClosingServer:
    """One fresh server of an ablation's closing race: ``side`` exported or original, in pair ``pair``.

    ``changes`` names the race: the env keys the exported manifest sets
    otherwise than the original (a value, or None for a key it leaves out).
    """

    changes: Mapping[str, str | None]
    pair: int
    side: str
    state: str
    tps: float | None = None
    fidelity: Mapping[str, Any] | None = None
    error_kind: str | None = None
    error_message: str | None = None
    seconds: float = 0.0
    finished_at: datetime.datetime | None = None

    @property
    def slot(self) -> tuple[int, str]:
        return (self.pair, self.side)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["finished_at"] = self.finished_at.isoformat() if self.finished_at else None
        return json_safe(data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationRecord:
    id: int
    name: str
    status: str
    mode: str
    manifest: Mapping[str, Any]
    switches: Sequence[Mapping[str, Any]]
    settings: Mapping[str, Any]
    verdicts: Sequence[Mapping[str, Any]] | None
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    servers: tuple[AblationServer, ...]
    closing: tuple[ClosingServer, ...] = ()

    @property
    def done_slots(self) -> frozenset[tuple[int, int, int | None]]:
        return frozenset(server.slot for server in self.servers)

    def closing_for(self, changes: Mapping[str, str | None]) -> tuple[ClosingServer, ...]:
        """The closing race's servers that raced these exported changes (other rows are of an
        earlier export, before more rounds changed a verdict)."""
        wanted = dict(changes)
        return tuple(server for server in self.closing if dict(server.changes) == wanted)


class AblationStore(TableStore):
    """The ablation tables on one database URL (created on first use)."""

    what = "ablation tables"

    def tables(self) -> list[sqlalchemy.Table]:
        return mapped_tables(AblationRow, AblationServerRow, ClosingServerRow)

    def start(
        self,
        *,
        name: str,
        mode: str,
        manifest: Mapping[str, Any],
        switches: Sequence[Mapping[str, Any]],
        settings: Mapping[str, Any],
        run_options: Mapping[str, Any] | None = None,
    ) -> AblationRecord:
        """Open ablation ``name``: a new one, or the stored one when it was started with the same
        mode, switches and settings (its servers stay; its status goes back to running).
        The same name with anything else is a ``StorageError`` naming what differs.
        ``run_options`` (how its verdicts are read, such as whether an output change may be
        exported) are stored under ``settings["run_options"]``, this run's replacing the last."""
        wanted = {"mode": mode, "switches": json_safe(list(switches)), "settings": json_safe(dict(settings))}
        options = json_safe(dict(run_options or {}))
        with self._session() as session:
            row = session.scalars(select(AblationRow).where(AblationRow.name == name)).one_or_none()
            if row is not None:
                compared = {k: v for k, v in row.settings.items() if k != RUN_OPTIONS}
                stored = {"mode": row.mode, "switches": row.switches, "settings": compared}
                differ = [key for key in wanted if stored[key] != wanted[key]]
                if differ:
                    raise StorageError(
                        f"ablation {name!r} is stored with other {', '.join(differ)}; "
                        "give another --name, or the same switches and settings to go on with it"
                    )
                row.status = ABLATION_RUNNING
                row.finished_at = None
                row.settings = {**compared, RUN_OPTIONS: options}
            else:
                wanted["settings"] = {**wanted["settings"], RUN_OPTIONS: options}
                row = AblationRow(name=name, status=ABLATION_RUNNING, manifest=json_safe(dict(manifest)), **wanted)
                session.add(row)
            session.flush()
            ablation_id = row.id
        return self.record(ablation_id)

    def add_server(self, ablation_id: int, server: AblationServer) -> None:
        with self._session() as session:
            row = self._row(session, ablation_id)
            if server.slot in {(s.round, s.block, s.arm) for s in row.servers}:
                raise StorageError(f"ablation {row.name!r}: slot {server.slot} is stored already")
            row.servers.append(
                AblationServerRow(
                    round=server.round,
                    block=server.block,
                    arm=server.arm,
                    overrides=dict(server.overrides),
                    state=server.state,
                    tps=finite_float(server.tps),
                    ppl=finite_float(server.ppl),
                    ppl_scores=json_safe([dict(s) for s in server.ppl_scores]),
                    fidelity=json_safe(dict(server.fidelity)) if server.fidelity is not None else None,
                    error_kind=server.error_kind,
                    error_message=server.error_message,
                    phases={str(k): float(v) for k, v in server.phases.items()},
                    log_tail=server.log_tail,
                    seconds=server.seconds,
                )
            )

    def add_closing(self, ablation_id: int, server: ClosingServer) -> None:
        with self._session() as session:
            row = self._row(session, ablation_id)
            changes = json_safe(dict(server.changes))
            if any(c.changes == changes and (c.pair, c.side) == server.slot for c in row.closing):
                raise StorageError(f"ablation {row.name!r}: closing server {server.slot} is stored already")
            row.closing.append(
                ClosingServerRow(
                    changes=changes,
                    pair=server.pair,
                    side=server.side,
                    state=server.state,
                    tps=finite_float(server.tps),
                    fidelity=json_safe(dict(server.fidelity)) if server.fidelity is not None else None,
                    error_kind=server.error_kind,
                    error_message=server.error_message,
                    seconds=server.seconds,
                )
            )

    def finish(self, ablation_id: int, *, status: str, verdicts: Sequence[Mapping[str, Any]] | None) -> None:
        if status not in ABLATION_STATUSES:
            raise ValueError(f"unknown ablation status {status!r}")
        with self._session() as session:
            row = self._row(session, ablation_id)
            row.status = status
            row.verdicts = None if verdicts is None else json_safe([dict(v) for v in verdicts])
            row.finished_at = utc_now()

    def record(self, ablation_id: int) -> AblationRecord:
        with self._session() as session:
            return _record(self._row(session, ablation_id))

    def find(self, name: str) -> AblationRecord | None:
        query = (
            select(AblationRow)
            .where(AblationRow.name == name)
            .options(selectinload(AblationRow.servers), selectinload(AblationRow.closing))
        )
        with self._session() as session:
            row = session.scalars(query).one_or_none()
            return None if row is None else _record(row)

    def names(self) -> list[str]:
        with self._session() as session:
            return list(session.scalars(select(AblationRow.name).order_by(AblationRow.id)).all())

    @staticmethod
    def _row(session: Session, ablation_id: int) -> AblationRow:
        row = session.get(AblationRow, ablation_id)
        if row is None:
            raise StorageError(f"no ablation with id {ablation_id}")
        return row


def stored_ablation(url: str | None, name: str) -> AblationRecord:
    """Ablation ``name`` as stored at ``url``; a missing database (never created here) or name is a
    ``StudyNotFoundError`` (exit code 2) naming the ablations that are stored."""
    url = _existing_database(url, holds=AblationRow.__tablename__, what="ablation")
    with AblationStore(url) as store:
        record = store.find(name)
        if record is not None:
            return record
        names = store.names()
    raise StudyNotFoundError(f"no ablation {name!r} in {redact(url)} (stored: {', '.join(names) if names else 'none'})")


def _record(row: AblationRow) -> AblationRecord:
    return AblationRecord(
        id=row.id,
        name=row.name,
        status=row.status,
        mode=row.mode,
        manifest=row.manifest,
        switches=list(row.switches),
        settings=dict(row.settings),
        verdicts=None if row.verdicts is None else list(row.verdicts),
        started_at=as_utc(row.started_at),
        finished_at=as_utc(row.finished_at) if row.finished_at else None,
        servers=tuple(
            AblationServer(
                round=s.round,
                block=s.block,
                arm=s.arm,
                overrides=dict(s.overrides),
                state=s.state,
                tps=s.tps,
                ppl=s.ppl,
                ppl_scores=list(s.ppl_scores),
                fidelity=s.fidelity,
                error_kind=s.error_kind,
                error_message=s.error_message,
                phases=dict(s.phases),
                log_tail=s.log_tail,
                seconds=s.seconds,
                finished_at=as_utc(s.finished_at),
            )
            for s in row.servers
        ),
        closing=tuple(
            ClosingServer(
                changes=dict(c.changes),
                pair=c.pair,
                side=c.side,
                state=c.state,
                tps=c.tps,
                fidelity=c.fidelity,
                error_kind=c.error_kind,
                error_message=c.error_message,
                seconds=c.seconds,
                finished_at=as_utc(c.finished_at),
            )
            for c in row.closing
        ),
    )
