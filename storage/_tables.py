"""Our tables, beside Optuna's in the same database: what Optuna does not hold.

``sweeper_trials`` has one row per Optuna trial (joined by study name and
trial number): the params and env overrides, the rendered manifest, the
measured TPS and PPL with the cap in force, versions, the error and the
server's log tail. ``sweeper_phases`` holds phase timings and
``sweeper_requests`` the per-request measurements.
"""

from __future__ import annotations

import datetime
from typing import Any

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
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


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
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    # the worker refreshes this while the trial runs; an old one means a dead worker
    heartbeat_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )

    phases: Mapped[list[PhaseRow]] = relationship(
        back_populates="trial", order_by="PhaseRow.position", cascade="all, delete-orphan"
    )
    requests: Mapped[list[RequestRow]] = relationship(
        back_populates="trial", order_by="RequestRow.position", cascade="all, delete-orphan"
    )


class PhaseRow(Base):
    __tablename__ = "sweeper_phases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_row_id: Mapped[int] = mapped_column(
        ForeignKey("sweeper_trials.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    seconds: Mapped[float] = mapped_column(Float)

    trial: Mapped[TrialRow] = relationship(back_populates="phases")


class RequestRow(Base):
    __tablename__ = "sweeper_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_row_id: Mapped[int] = mapped_column(
        ForeignKey("sweeper_trials.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(64), default="")
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    trial: Mapped[TrialRow] = relationship(back_populates="requests")
