"""Verification records: re-measurements of a study's best trials on held-out data.

``sweeper_verifications`` has one row per verification of one trial (the
criteria it was judged by, the held-out data, the control, the verdict) and
``sweeper_verification_runs`` one row per repeat (a fresh server each): the
candidate's repeats and, with a control, the base configuration's repeats
(``subject`` tells them apart). A verification is written when it starts
(status ``running``) and each repeat as soon as it ends, so an interrupted
verification keeps what it measured and a later verify goes on from there;
the verdict is written last.

Files written before the control existed lack its columns: opening the
store adds them (``ALTER TABLE ... ADD COLUMN``, nullable or with a default
that describes the old rows), so an old study file opens as it was.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy
from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship, selectinload

from storage._engine import create_engine, create_schema, normalize_url, redact
from storage._tables import Base, TableStore, mapped_tables
from storage._values import StoredWord, as_utc, finite_float, json_safe, utc_now
from storage.errors import StorageError

logger = logging.getLogger(__name__)


class VerificationStatus(StoredWord):
    """Where a verification stands: its verdict once finished (verified, failed), else running
    or interrupted ("running" also stands for one that never finished); stored and printed as
    its word."""

    VERIFIED = "verified"
    FAILED = "failed"
    RUNNING = "running"
    INTERRUPTED = "interrupted"


# whose repeat a run is: the candidate's, or the base configuration's (the control)
CANDIDATE = "candidate"
BASE = "base"
SUBJECTS = (CANDIDATE, BASE)


# how a verification treated the base: its repeats ran beside the candidate's ("measured"),
# the candidate is the base itself ("is-base"), the user switched the control off ("off");
# None: stored before there was a control
class Control(StoredWord):
    """How a verification treated the base; stored and printed as its word."""

    MEASURED = "measured"
    IS_BASE = "is-base"
    OFF = "off"


class VerificationRow(Base):
    __tablename__ = "sweeper_verifications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_name: Mapped[str] = mapped_column(String(512), index=True)
    trial_number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    tuned_tps: Mapped[float] = mapped_column(Float)
    tuned_ppl: Mapped[float] = mapped_column(Float)
    ppl_cap: Mapped[float] = mapped_column(Float)
    tolerance: Mapped[float] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(Integer)
    median_tps: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_ppl: Mapped[float | None] = mapped_column(Float, nullable=True)
    # where the held-out data came from (file or dataset id), and what else was set
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # the control (added later: nullable, so rows of older files read as "no control")
    control: Mapped[str | None] = mapped_column(String(16), nullable=True)
    claimed_speedup: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    base_params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    base_trial: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # the noise prior the speedup was judged with (``--noise``); its column keeps the name it
    # was first stored under, so that older files open as they are
    noise: Mapped[float | None] = mapped_column("spread_prior", Float, nullable=True)
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_confidence: Mapped[float | None] = mapped_column(Float, nullable=True)

    runs: Mapped[list[VerificationRunRow]] = relationship(
        back_populates="verification",
        order_by="(VerificationRunRow.repeat, VerificationRunRow.id)",
        cascade="all, delete-orphan",
    )


class VerificationRunRow(Base):
    __tablename__ = "sweeper_verification_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    verification_id: Mapped[int] = mapped_column(ForeignKey("sweeper_verifications.id", ondelete="CASCADE"), index=True)
    repeat: Mapped[int] = mapped_column(Integer)
    # candidate | base; older files get the column with "candidate", what their rows were
    subject: Mapped[str] = mapped_column(String(16), default=CANDIDATE, server_default=CANDIDATE)
    state: Mapped[str] = mapped_column(String(16))  # complete | failed
    tps: Mapped[float | None] = mapped_column(Float, nullable=True)
    ppl: Mapped[float | None] = mapped_column(Float, nullable=True)
    ppl_infinite: Mapped[bool] = mapped_column(default=False)
    early_stopped: Mapped[bool] = mapped_column(default=False)
    error_kind: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    phases: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    extras: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    log_tail: Mapped[str | None] = mapped_column(Text, nullable=True)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)

    verification: Mapped[VerificationRow] = relationship(back_populates="runs")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerificationRun:
    """One repeat: a fresh server measuring the candidate (or, ``subject`` "base", the
    base configuration beside it) on the held-out data."""

    repeat: int
    state: str  # complete | failed
    subject: str = CANDIDATE
    tps: float | None = None
    ppl: float | None = None  # math.inf: a non-finite logprob
    early_stopped: bool = False
    error_kind: str | None = None
    error_message: str | None = None
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    log_tail: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.ppl is not None and not math.isfinite(self.ppl):
            data["ppl"] = "inf"
        data.pop("log_tail")
        return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerificationRecord:
    """One verification of one trial, as stored."""

    id: int
    study_name: str
    trial_number: int
    status: VerificationStatus
    reason: str
    params: Mapping[str, Any]
    tuned_tps: float
    tuned_ppl: float
    ppl_cap: float
    tolerance: float
    repeats: int
    median_tps: float | None
    max_ppl: float | None
    data: Mapping[str, Any]
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    runs: tuple[VerificationRun, ...] = ()  # the candidate's repeats
    # the control: the base configuration measured beside the candidate (None: stored before
    # there was one); ``speedup*`` is the held-out speedup interval over the base (1.10: 10 %
    # faster) and ``spread`` the pooled between-server spread it was made with
    control: Control | None = None
    claimed_speedup: bool | None = None
    base_params: Mapping[str, Any] | None = None
    base_trial: int | None = None
    noise: float | None = None
    spread: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    speedup_confidence: float | None = None
    base_runs: tuple[VerificationRun, ...] = ()

    @property
    def verified(self) -> bool:
        return self.status is VerificationStatus.VERIFIED

    @property
    def finished(self) -> bool:
        return self.status in (VerificationStatus.VERIFIED, VerificationStatus.FAILED)

    @property
    def tps_deviation(self) -> float | None:
        """(median held-out TPS - tuned TPS) / tuned TPS."""
        if self.median_tps is None or not self.tuned_tps:
            return None
        return (self.median_tps - self.tuned_tps) / self.tuned_tps

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["runs"] = [run.to_dict() for run in self.runs]
        data["base_runs"] = [run.to_dict() for run in self.base_runs]
        data["tps_deviation"] = self.tps_deviation
        for key in ("started_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


class VerificationStore(TableStore):
    """The verification tables on one database URL (created on first use)."""

    what = "verification tables"

    def __init__(self, url: str | None = None) -> None:
        super().__init__(url)
        create_schema(self.url, lambda: add_missing_columns(self.engine, self.tables()), self.what)

    def tables(self) -> list[sqlalchemy.Table]:
        return mapped_tables(VerificationRow, VerificationRunRow)

    # -- writing ----------------------------------------------------------------

    def start(
        self,
        *,
        study_name: str,
        trial_number: int,
        params: Mapping[str, Any],
        tuned_tps: float,
        tuned_ppl: float,
        ppl_cap: float,
        tolerance: float,
        repeats: int,
        data: Mapping[str, Any],
        control: Control | None = None,
        claimed_speedup: bool | None = None,
        base_params: Mapping[str, Any] | None = None,
        base_trial: int | None = None,
        noise: float | None = None,
    ) -> int:
        """Record a verification that starts now; returns its id."""
        control_word = _control_word(control)
        with self._session() as session:
            row = VerificationRow(
                study_name=study_name,
                trial_number=trial_number,
                status=VerificationStatus.RUNNING.value,
                reason="",
                params=dict(params),
                tuned_tps=tuned_tps,
                tuned_ppl=tuned_ppl,
                ppl_cap=ppl_cap,
                tolerance=tolerance,
                repeats=repeats,
                data=dict(data),
                control=control_word,
                claimed_speedup=claimed_speedup,
                base_params=None if base_params is None else json_safe(dict(base_params)),
                base_trial=base_trial,
                noise=noise,
            )
            session.add(row)
            session.flush()
            return row.id

    def resume(
        self,
        verification_id: int,
        *,
        tuned_tps: float,
        tolerance: float,
        repeats: int,
        control: Control | None,
        claimed_speedup: bool | None,
        noise: float | None,
    ) -> None:
        """Take up an unfinished verification again: its stored repeats stay, the criteria
        are the new call's, the verdict is cleared until the new one is written."""
        control_word = _control_word(control)
        with self._session() as session:
            row = self._row(session, verification_id)
            row.status = VerificationStatus.RUNNING.value
            row.reason = ""
            row.tuned_tps = tuned_tps
            row.tolerance = tolerance
            row.repeats = repeats
            row.control = control_word
            row.claimed_speedup = claimed_speedup
            row.noise = noise
            row.finished_at = None

    def add_run(self, verification_id: int, run: VerificationRun) -> None:
        with self._session() as session:
            row = self._row(session, verification_id)
            if run.subject not in SUBJECTS:
                raise ValueError(f"unknown verification run subject {run.subject!r}")
            row.runs.append(
                VerificationRunRow(
                    repeat=run.repeat,
                    subject=run.subject,
                    state=run.state,
                    tps=run.tps,
                    ppl=finite_float(run.ppl),
                    ppl_infinite=run.ppl is not None and not math.isfinite(run.ppl),
                    early_stopped=run.early_stopped,
                    error_kind=run.error_kind,
                    error_message=run.error_message,
                    phases={str(k): float(v) for k, v in run.phases.items()},
                    extras=json_safe(dict(run.extras)),
                    log_tail=run.log_tail,
                    seconds=run.seconds,
                )
            )

    def finish(
        self,
        verification_id: int,
        *,
        status: VerificationStatus,
        reason: str,
        median_tps: float | None,
        max_ppl: float | None,
        spread: float | None = None,
        speedup: tuple[float, float, float] | None = None,
        speedup_confidence: float | None = None,
    ) -> None:
        """Write the verdict; ``speedup``: (value, low, high) over the base at ``speedup_confidence``."""
        status = VerificationStatus(status)  # ValueError: not a verification status
        with self._session() as session:
            row = self._row(session, verification_id)
            row.status = status.value
            row.reason = reason
            row.median_tps = median_tps
            row.max_ppl = finite_float(max_ppl)
            row.spread = spread
            row.speedup, row.speedup_low, row.speedup_high = speedup or (None, None, None)
            row.speedup_confidence = speedup_confidence if speedup else None
            row.finished_at = utc_now()

    # -- reading ----------------------------------------------------------------

    def records(self, study_name: str) -> list[VerificationRecord]:
        """Every verification of the study, oldest first."""
        query = (
            select(VerificationRow)
            .where(VerificationRow.study_name == study_name)
            .options(selectinload(VerificationRow.runs))
            .order_by(VerificationRow.id)
        )
        with self._session() as session:
            return [_record(row) for row in session.scalars(query).all()]

    def latest(self, study_name: str) -> dict[int, VerificationRecord]:
        """The newest verification of each verified-or-tried trial, by trial number."""
        return latest_by_trial(self.records(study_name))

    @staticmethod
    def _row(session: Session, verification_id: int) -> VerificationRow:
        row = session.get(VerificationRow, verification_id)
        if row is None:
            raise StorageError(f"no verification with id {verification_id}")
        return row


def _control_word(control: Control | None) -> str | None:
    """The word a control is stored as (ValueError: not a control)."""
    return None if control is None else Control(control).value


def add_missing_columns(engine: sqlalchemy.Engine, tables: Sequence[sqlalchemy.Table]) -> list[str]:
    """Add the columns of ``tables`` that an older file lacks; returns them as ``table.column``.

    Only nullable columns or ones with a server default can be added this way,
    which is how every column added after a table's first release is declared.
    A worker that adds the same column first is no error: the column is there.
    """
    added = []
    inspector = sqlalchemy.inspect(engine)
    for table in tables:
        if not inspector.has_table(table.name):
            continue
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=engine.dialect)
            ddl = f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"
            if isinstance(column.server_default, sqlalchemy.DefaultClause):
                ddl += f" DEFAULT '{column.server_default.arg}' NOT NULL"
            try:
                with engine.begin() as connection:
                    connection.execute(sqlalchemy.text(ddl))
            except sqlalchemy.exc.OperationalError as exc:
                if "duplicate column" not in str(exc.orig):  # SQLite: another worker added it
                    raise
                continue
            added.append(f"{table.name}.{column.name}")
            logger.info("added column %s.%s to an older study file", table.name, column.name)
    return added


def latest_by_trial(records: Sequence[VerificationRecord]) -> dict[int, VerificationRecord]:
    """The newest record per trial (finished ones win over a newer unfinished one)."""
    latest: dict[int, VerificationRecord] = {}
    for record in sorted(records, key=lambda r: r.id):
        current = latest.get(record.trial_number)
        if current is None or record.finished or not current.finished:
            latest[record.trial_number] = record
    return latest


def verifications(url: str | None, study_name: str) -> list[VerificationRecord]:
    """Every verification of a study (none when the tables do not exist yet)."""
    url = normalize_url(url)
    engine = create_engine(url)
    try:
        if not sqlalchemy.inspect(engine).has_table(VerificationRow.__tablename__):
            return []
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise StorageError(f"study database {redact(url)}: {exc}") from exc
    finally:
        engine.dispose()
    store = VerificationStore(url)
    try:
        return store.records(study_name)
    finally:
        store.close()


def _record(row: VerificationRow) -> VerificationRecord:
    return VerificationRecord(
        id=row.id,
        study_name=row.study_name,
        trial_number=row.trial_number,
        status=VerificationStatus(row.status),
        reason=row.reason or "",
        params=dict(row.params or {}),
        tuned_tps=row.tuned_tps,
        tuned_ppl=row.tuned_ppl,
        ppl_cap=row.ppl_cap,
        tolerance=row.tolerance,
        repeats=row.repeats,
        median_tps=row.median_tps,
        max_ppl=row.max_ppl,
        data=dict(row.data or {}),
        started_at=as_utc(row.started_at),
        finished_at=as_utc(row.finished_at),
        runs=tuple(_run(run) for run in row.runs if run.subject != BASE),
        control=None if row.control is None else Control(row.control),
        claimed_speedup=row.claimed_speedup,
        base_params=None if row.base_params is None else dict(row.base_params),
        base_trial=row.base_trial,
        noise=row.noise,
        spread=row.spread,
        speedup=row.speedup,
        speedup_low=row.speedup_low,
        speedup_high=row.speedup_high,
        speedup_confidence=row.speedup_confidence,
        base_runs=tuple(_run(run) for run in row.runs if run.subject == BASE),
    )


def _run(run: VerificationRunRow) -> VerificationRun:
    return VerificationRun(
        repeat=run.repeat,
        subject=run.subject or CANDIDATE,
        state=run.state,
        tps=run.tps,
        ppl=math.inf if run.ppl_infinite else run.ppl,
        early_stopped=bool(run.early_stopped),
        error_kind=run.error_kind,
        error_message=run.error_message,
        phases=dict(run.phases or {}),
        extras=dict(run.extras or {}),
        log_tail=run.log_tail,
        seconds=run.seconds or 0.0,
    )
