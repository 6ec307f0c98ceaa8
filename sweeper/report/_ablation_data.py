"""A stored ablation read for its report: the record, its plan and its verdicts, and their words."""

from __future__ import annotations

import dataclasses

from storage import (
    ABLATION_INTERRUPTED,
    ABLATION_RUNNING,
    AblationRecord,
    AblationServer,
    ClosingServer,
    normalize_url,
    redact,
    stored_ablation,
)
from sweeper.ablation import AblationPlan, AblationResult, ClosingRace, SwitchReport, closing_text, judge_stored
from sweeper.errors import StudyError


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationReportData:
    """A stored ablation and its verdicts, as the report shows them."""

    record: AblationRecord
    plan: AblationPlan
    result: AblationResult
    storage: str  # redacted
    planned_servers: int  # the schedule's servers, to the last round stored

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def closing(self) -> ClosingRace | None:
        """The closing race of the exported manifest against the original (None: none stored)."""
        return self.result.closing

    @property
    def closing_servers(self) -> tuple[ClosingServer, ...]:
        """The stored servers of the closing race of this export (not those of an earlier one)."""
        changes = self.result.changes
        return self.record.closing_for(changes) if changes else ()

    def stored_text(self) -> str:
        return (
            f"{len(self.record.servers)} of {self.planned_servers} servers of {self.plan.rounds} round(s) stored, "
            f"started {self.record.started_at:%Y-%m-%d %H:%M} UTC"
        )

    def messages(self) -> tuple[str, ...]:
        """What a reader must know before trusting the figures: an ablation that has not finished."""
        stored = f"{len(self.record.servers)} of {self.planned_servers} servers of {self.plan.rounds} round(s)"
        if self.status == ABLATION_RUNNING:
            return (f"ablation {self.name} is still running: the report shows the {stored} stored so far",)
        if self.status == ABLATION_INTERRUPTED:
            return (
                f"ablation {self.name} was interrupted: the report shows the {stored} stored; "
                "the same 'sweeper ablate' command goes on from the next server",
            )
        return ()

    def basis_line(self) -> str:
        """What the intervals rest on: the facts of ``sweeper status --ablation``'s last line."""
        effects, result = self.result.effects, self.result
        spread = effects.spread
        return (
            f"intervals at {effects.level:.2%} each ({self.plan.confidence:.0%} for the whole ablation); "
            f"between-server spread {spread.relative:.1%} on {spread.df:g} df; {result.servers} servers, "
            f"{result.failed_servers} failed, {result.gpu_seconds / 60:.1f} GPU minutes"
        )

    def arm_label(self, server: AblationServer) -> str:
        if server.arm is None:
            return "base"
        switches = self.plan.switches
        return switches[server.arm].label if 0 <= server.arm < len(switches) else f"arm {server.arm}"


def read_ablation(storage: str | None, name: str) -> AblationReportData:
    """Ablation ``name`` judged from its stored servers; one with none stored is a ``StudyError``."""
    record = stored_ablation(storage, name)
    if not record.servers:
        raise StudyError(
            f"ablation {name!r} ({record.status}) has no servers stored yet: nothing to report "
            "(run 'sweeper ablate' first)"
        )
    stored = judge_stored(record)
    return AblationReportData(
        record=record,
        plan=stored.plan,
        result=stored.result,
        storage=redact(normalize_url(storage)),
        planned_servers=stored.planned_servers,
    )


def row_label(report: SwitchReport) -> str:
    """How a plot's row and a table's first cells name a switch: ``ENFORCE_EAGER=1 vs 0``."""
    return f"{report.switch.label} vs {report.switch.reference_text}"


def closing_lines(data: AblationReportData) -> list[str]:
    """What the closing race of the exported manifest against the original says, or why none is stored."""
    if data.closing is not None:
        return [closing_text(data.result)]
    return [f"no closing race stored: {closing_text(data.result)}"]
