"""Our tables, beside Optuna's in the same database: what Optuna does not hold.

``sweeper_trials`` has one row per Optuna trial (joined by study name and
trial number): the params and env overrides, the rendered manifest, the
measured TPS and PPL with the cap in force, versions, the error and the
server's log tail. ``sweeper_phases`` holds phase timings and
``sweeper_requests`` the per-request measurements.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Any, TypeVar

import sqlalchemy
from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from storage._engine import create_engine, create_schema, describe_error, normalize_url, redact
from storage._values import utc_now
from storage.errors import StorageError


class Base(DeclarativeBase):
    pass


def mapped_tables(*rows: type[Base]) -> list[sqlalchemy.Table]:
    """The tables these row classes are mapped to, as ``Base``'s metadata holds them."""
    return [Base.metadata.tables[row.__tablename__] for row in rows]


_Store = TypeVar("_Store", bound="TableStore")


class TableStore:
    """Some of our tables on one database URL: created on first use, every
    session one transaction whose database errors become ``StorageError``."""

    what = "sweeper's tables"

    def __init__(self, url: str | None = None, *, engine: sqlalchemy.Engine | None = None) -> None:
        """``engine``: one already open on ``url`` (an Optuna storage's), used and left open."""
        self.url = normalize_url(url)
        self._owns_engine = engine is None
        self.engine = create_engine(self.url) if engine is None else engine
        create_schema(
            self.url,
            lambda: Base.metadata.create_all(self.engine, tables=self.tables()),
            self.what,
        )

    def tables(self) -> list[sqlalchemy.Table] | None:
        """The tables this store needs (None: every table declared on ``Base``)."""
        return None

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _session(self) -> Iterator[Session]:
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                yield session
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise StorageError(f"study database {redact(self.url)}: {describe_error(exc)}") from exc


class TrialRow(Base):
    __tablename__ = "sweeper_trials"
    __table_args__ = (UniqueConstraint("study_name", "number", name="sweeper_trials_study_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_name: Mapped[str] = mapped_column(String(512), index=True)
    number: Mapped[int] = mapped_column(Integer)
    optuna_trial_id: Mapped[int] = mapped_column(Integer)
    # running | complete | failed | interrupted | stale
    state: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(256), default="sampled")
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    overrides: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    tps: Mapped[float | None] = mapped_column(Float, nullable=True)
    ppl: Mapped[float | None] = mapped_column(Float, nullable=True)
    ppl_cap: Mapped[float | None] = mapped_column(Float, nullable=True)
    feasible: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    ppl_reused_from: Mapped[int | None] = mapped_column(Integer, nullable=True)
    early_stopped: Mapped[bool] = mapped_column(Boolean, default=False)
    tps_imputed: Mapped[bool] = mapped_column(Boolean, default=False)
    extras: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    versions: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    error_kind: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_tail: Mapped[str | None] = mapped_column(Text, nullable=True)
    server_token: Mapped[str | None] = mapped_column(String(256), nullable=True)
    host: Mapped[str] = mapped_column(String(256), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    # the worker refreshes this while the trial runs; an old one means a dead worker
    heartbeat_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    phases: Mapped[list[PhaseRow]] = relationship(
        back_populates="trial", order_by="PhaseRow.position", cascade="all, delete-orphan"
    )
    requests: Mapped[list[RequestRow]] = relationship(
        back_populates="trial", order_by="RequestRow.position", cascade="all, delete-orphan"
    )


class PhaseRow(Base):
    __tablename__ = "sweeper_phases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_row_id: Mapped[int] = mapped_column(ForeignKey("sweeper_trials.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    seconds: Mapped[float] = mapped_column(Float)

    trial: Mapped[TrialRow] = relationship(back_populates="phases")


class RequestRow(Base):
    __tablename__ = "sweeper_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_row_id: Mapped[int] = mapped_column(ForeignKey("sweeper_trials.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(64), default="")
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    trial: Mapped[TrialRow] = relationship(back_populates="requests")
