"""Everything a report shows, read once from the study database into plain frozen data.

The figure model (``_figures``), the table model (``_tables``) and the file writers
(``_files``, ``_page``) draw from ``ReportData`` only, so what a report shows can be
tested on the data and on the figures without a browser. Its trials and configurations
are ``_points``'s; the parameters' importance is ``_importance``'s.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from storage import (
    TrialRecord,
    TrialStore,
    VerificationRecord,
    is_answer,
    normalize_url,
    pareto_front,
    study_status,
)
from storage import verifications as all_verifications
from sweeper._text import percent_text
from sweeper.answer import Answer, study_answer, tps_text, verify_command
from sweeper.errors import StudyError, SweeperError
from sweeper.manifest import Manifest, is_secret_name
from sweeper.measure import TimeByPhase, time_by_phase
from sweeper.report._importance import importance
from sweeper.report._points import (
    FAILED_TRIAL,
    FEASIBLE,
    INFEASIBLE,
    RUNNING,
    ConfigurationPoint,
    EnvChange,
    TrialPoint,
)
from sweeper.study import (
    Claim,
    ConfirmSettings,
    Outcome,
    PplStatement,
    StudyRecipe,
    is_confirmation,
    ppl_statement,
    recipe_from_settings,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportData:
    study_name: str
    storage: str
    mode: str
    settings: Mapping[str, Any]
    cap: float | None
    counts: Mapping[str, int]
    points: tuple[TrialPoint, ...]
    param_names: tuple[str, ...]
    answer: Answer
    pareto: tuple[int, ...]
    verifications: tuple[VerificationRecord, ...]
    best_so_far: tuple[tuple[int, float | None], ...]
    importance: Mapping[str, Mapping[str, float]]  # "tps"/"ppl" -> parameter -> importance
    importance_note: str
    time: TimeByPhase  # the study's server time by phase
    env_changes: tuple[EnvChange, ...]
    base_name: str | None
    base_known: bool  # False: the base manifest could not be read (base values unknown)
    # the gate-passing configurations at their estimates (empty: no standing, draw per trial)
    configurations: tuple[ConfigurationPoint, ...] = ()

    @property
    def race_servers(self) -> int:
        """Trials that re-measured a configuration in a race (confirmation trials)."""
        return sum(1 for p in self.points if is_confirmation(p.role))

    @property
    def searched(self) -> int:
        """Trials that measured a configuration for the search (the base's first one included)."""
        return len(self.points) - self.race_servers

    def trials_text(self) -> str:
        """'14 trials: 6 searched, 8 race servers'."""
        races = self.race_servers
        head = f"{len(self.points)} trial{'s' if len(self.points) != 1 else ''}"
        if not races:
            return head
        return f"{head}: {self.searched} searched, {races} race server{'s' if races != 1 else ''}"

    @property
    def answer_tps(self) -> float | None:
        """The answer's one TPS figure: its estimate after selection (``Standing.tps_interval``);
        the trial's own reading only where the study has no standing (None: no answer)."""
        config = self.answer_configuration
        if config is not None:
            return config.tps
        record = self.answer.record
        return None if record is None or record.tps is None else float(record.tps)

    def claim_text(self) -> str | None:
        """The claimed speedup over the base at the study-wise level: '+26.5 % (95 % +2.1 to +56.9)'
        (None: no claim over the base)."""
        now = self.answer.standing
        if now is None or not self.answer.is_the_claim or now.speedup is None:
            return None
        speedup = now.speedup
        level = now.basis.study_confidence if now.basis is not None else speedup.confidence
        return (
            f"{percent_text(speedup.value)} ({level * 100:.0f} % {percent_text(speedup.low).removesuffix(' %')} "
            f"to {percent_text(speedup.high).removesuffix(' %')})"
        )

    def answer_tps_text(self) -> str | None:
        """'198.6 tok/s (95 % interval 177.7-222.1, 2 servers after selection)' (None: no answer)."""
        tps = self.answer_tps
        if tps is None:
            return None
        config = self.answer_configuration
        if config is None:
            return f"{tps_text(tps)} (one server)"
        servers = len(config.counted)
        after = " after selection" if len(config.counted) < len(config.readings) else ""
        return f"{tps_text(tps)} ({config.interval_text()}, {servers} server{'s' if servers != 1 else ''}{after})"

    def claim_line(self) -> str | None:
        """The claim over the base in plain words, at the study-wise level (None: no standing)."""
        now, record = self.answer.standing, self.answer.record
        if now is None or record is None:
            return None
        if not self.answer.is_the_claim:
            return self.answer.claim_text()
        incumbent = now.incumbent
        if now.base is None:
            return "the base manifest was not measured: no speedup over it can be stated"
        if incumbent is not None and incumbent.key == now.base.key:
            return "the answer is the base manifest itself: no configuration was confirmed faster than it"
        claim = self.claim_text()
        if claim is None:
            return None
        if now.claim is Claim.FASTER:
            words = "faster than the base manifest"
        elif now.claim is Claim.SLOWER:
            words = "slower than the base manifest"
        else:
            words = "not distinguishable from the base manifest (the interval includes 0 %)"
        line = f"{claim}: {words}"
        if now.basis is not None:
            excluded = ", ".join(f"#{n}" for n in now.basis.excluded)
            line += f", from {len(now.basis.answer_trials)} round(s) after selection"
            line += f" (trial {excluded}, which selected it, is not counted)" if excluded else ""
        return line

    def noise_line(self) -> str | None:
        """The between-server spread the claim rests on (None: no standing)."""
        now = self.answer.standing
        if now is None or now.incumbent is None:
            return None
        return (
            f"between-server spread {now.spread.relative:.1%} (SD of log TPS; "
            f"{now.spread.measured_df} df from repeats in fresh servers, prior "
            f"{now.settings.noise:.0%} as {now.settings.prior_df:g} df); "
            f"{sum(1 for d in now.decisions if d.outcome is not Outcome.SCREENED)} race(s)"
            + (f"; {now.prior_text}" if now.prior_text else "")
        )

    def winner_ppl(self) -> PplStatement | None:
        """The winner's PPL with its interval and the re-run's chance (None: no interval known)."""
        record = self.answer.record
        if record is None:
            return None
        statement = ppl_statement(record.ppl, record.extras, record.ppl_cap, self.settings)
        return statement if statement is not None and statement.known else None

    @property
    def unset_label(self) -> str:
        """How a base value absent from the base env reads (unknown when the base was not read)."""
        return "(not set)" if self.base_known else "(unknown: pass --manifest)"

    @property
    def winner(self) -> TrialPoint | None:
        record = self.answer.record
        return None if record is None else self.point(record.number)

    @property
    def answer_configuration(self) -> ConfigurationPoint | None:
        return next((c for c in self.configurations if c.is_answer), None)

    @property
    def base_configuration(self) -> ConfigurationPoint | None:
        return next((c for c in self.configurations if c.is_base), None)

    def configuration_of(self, number: int) -> ConfigurationPoint | None:
        return next((c for c in self.configurations if number in c.numbers), None)

    def configuration_front(self) -> list[ConfigurationPoint]:
        """Configurations no other beats on both PPL (down) and TPS estimate (up), by PPL."""
        front = [
            c
            for c in self.configurations
            if not any(
                o.tps >= c.tps and o.ppl <= c.ppl and (o.tps > c.tps or o.ppl < c.ppl) for o in self.configurations
            )
        ]
        return sorted(front, key=lambda c: (c.ppl, -c.tps))

    def answer_label(self, sep: str = " ") -> str | None:
        """The answer's mark: its trial, status, TPS estimate and interval (None: no answer).

        ``sep`` goes between the trial and the figures (a line break in a plot).
        """
        record = self.answer.record
        if record is None:
            return None
        head = f"answer #{record.number} ({self.answer.status.upper()})"
        config = self.answer_configuration
        if config is None:  # no standing: the trial's own reading is all there is
            return head
        base = ", the base manifest" if config.is_base else ""
        claim = self.claim_text()
        over = f"{sep}{claim} over the base" if claim is not None else ""
        return f"{head}{base}:{sep}{config.tps_text()} ({config.interval_text()}){over}"

    def base_label(self, sep: str = " ") -> str | None:
        base = self.base_configuration
        if base is None:
            return None
        return f"base:{sep}{base.tps_text()} ({base.interval_text()})"

    def point(self, number: int) -> TrialPoint:
        return next(p for p in self.points if p.number == number)

    def by_category(self, category: str) -> list[TrialPoint]:
        return [p for p in self.points if p.category == category]

    @property
    def has_feasible(self) -> bool:
        return any(p.category == FEASIBLE for p in self.points)

    def messages(self) -> list[str]:
        """What a reader must know before trusting the report (also printed by the CLI)."""
        notes = []
        if not self.has_feasible:
            notes.append(
                f"no trial of study {self.study_name!r} passed the PPL cap"
                + (f" {self.cap:.4f}" if self.cap is not None else "")
                + ": there is no winner (the report shows what was tried)"
            )
        elif not self.answer.verified:
            record = self.answer.record
            assert record is not None
            notes.append(
                f"the winner, trial #{record.number}, is {self.answer.status.upper()}: run "
                f"'{verify_command(self.study_name, self.storage)}' to re-measure it on held-out data"
            )
        return notes


def _category(record: TrialRecord) -> str:
    if record.state == "running":
        return RUNNING
    if record.state != "complete" or record.tps is None or record.ppl is None:
        return FAILED_TRIAL
    return FEASIBLE if is_answer(record) else INFEASIBLE


def _point(record: TrialRecord, verification: VerificationRecord | None) -> TrialPoint:
    category = _category(record)
    return TrialPoint(
        number=record.number,
        state=record.state,
        category=category,
        role=record.role,
        tps=record.tps if category != FAILED_TRIAL else None,
        ppl=record.ppl,
        params=dict(record.params),
        verification=verification.status if verification else None,
        tps_imputed=record.tps_imputed,
        early_stopped=record.early_stopped,
        error=f"{record.error_kind}: {record.error_message}" if record.error_message else None,
        seconds=sum(seconds for _, seconds in record.phases),
    )


def _configurations(answer: Answer, records: Sequence[TrialRecord]) -> tuple[ConfigurationPoint, ...]:
    """The standing's configurations at ``tps_interval`` (empty: no standing)."""
    now = answer.standing
    if now is None:
        return ()
    reading = {r.number: float(r.tps) for r in records if r.tps is not None}
    chosen = answer.configuration
    points = []
    for config in now.configurations:
        interval = now.tps_interval(config)
        points.append(
            ConfigurationPoint(
                first=config.first,
                numbers=tuple(config.numbers),
                ppl=config.ppl,
                params=dict(config.params),
                readings=tuple((n, reading[n]) for n in sorted(config.numbers) if n in reading),
                tps=interval.value,
                low=interval.low,
                high=interval.high,
                confidence=interval.confidence,
                method=interval.method,
                is_base=config.is_base,
                is_answer=chosen is not None and config.key == chosen.key,
                counted=now.counted(config),  # the trials tps_interval is made of
            )
        )
    return tuple(points)


def _cap(records: Sequence[TrialRecord], settings: Mapping[str, Any]) -> float | None:
    caps = [r.ppl_cap for r in sorted(records, key=lambda r: r.number) if r.ppl_cap is not None]
    if caps:
        return caps[-1]
    value = settings.get("ppl_cap")
    return float(value) if isinstance(value, (int, float)) else None


def _best_so_far(points: Sequence[TrialPoint]) -> tuple[tuple[int, float | None], ...]:
    best: float | None = None
    series = []
    for point in sorted(points, key=lambda p: p.number):
        if point.category == FEASIBLE and point.tps is not None and not point.tps_imputed:
            best = point.tps if best is None else max(best, point.tps)
        series.append((point.number, best))
    return tuple(series)


def _base_env(
    base_manifest: Manifest | None, recipe: StudyRecipe, records: Sequence[TrialRecord]
) -> tuple[dict[str, str] | None, str | None]:
    if base_manifest is None and recipe.base_manifest:
        try:
            base_manifest = Manifest.load(recipe.base_manifest)
        except SweeperError as exc:
            logger.warning("base manifest of the study not readable: %s", exc)
    if base_manifest is not None:
        return dict(base_manifest.env), base_manifest.name
    for record in records:  # a trial that ran the base manifest unchanged
        if not record.overrides and isinstance(record.manifest, Mapping):
            return dict(record.manifest.get("env") or {}), None
    return None, None


def _env_changes(answer: Answer, base_env: Mapping[str, str] | None, recipe: StudyRecipe) -> tuple[EnvChange, ...]:
    record = answer.record
    if record is None:
        return ()
    overrides = {**recipe.overrides, **record.overrides}
    return tuple(
        EnvChange(
            key=key,
            base=None if base_env is None else base_env.get(key),
            answer=value,
        )
        for key, value in sorted(overrides.items())
        if not is_secret_name(key)
    )


def assemble_report_data(
    storage: str | None, study_name: str | None = None, *, base_manifest: Manifest | None = None
) -> ReportData:
    """Read the study for a report; StudyError when it does not exist or has no trials."""
    url = normalize_url(storage)
    status = study_status(url, study_name)
    if not status.trials:
        raise StudyError(
            f"study {status.study_name!r} has no trials yet: nothing to report "
            f"(run 'sweeper run --study {status.study_name}' first)"
        )
    store = TrialStore(url)
    try:
        records = store.records(status.study_name, details=True)
    finally:
        store.close()
    latest = status.verifications
    answer = study_answer(records, latest, ConfirmSettings.from_settings(status.settings))
    points = tuple(_point(r, latest.get(r.number)) for r in records)
    names: list[str] = []
    for record in records:
        names += [n for n in record.params if n not in names]
    recipe = recipe_from_settings(status.settings)
    base_env, base_name = _base_env(base_manifest, recipe, records)
    values, note = importance(url, status.study_name)
    return ReportData(
        study_name=status.study_name,
        storage=status.url,
        mode=str(status.settings.get("mode", "tps")),
        settings=dict(status.settings),
        cap=_cap(records, status.settings),
        counts=dict(status.counts),
        points=points,
        param_names=tuple(names),
        answer=answer,
        pareto=tuple(r.number for r in pareto_front(records)),
        verifications=tuple(sorted(latest.values(), key=lambda v: v.trial_number)),
        best_so_far=_best_so_far(points),
        importance=values,
        importance_note=note,
        time=time_by_phase(records, all_verifications(url, status.study_name)),
        env_changes=_env_changes(answer, base_env, recipe),
        base_name=base_name,
        base_known=base_env is not None,
        configurations=_configurations(answer, records),
    )
