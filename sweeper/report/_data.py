"""Everything a report shows, read once from the study database into plain frozen data.

The plot modules (``_png``, ``_plotly``) and the file writers (``_files``,
``_page``) draw from ``ReportData`` only, so what a report shows can be
tested on the data and on the figures without a browser.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from storage import (
    TPS_IMPUTED_ATTR,
    TrialRecord,
    TrialStore,
    VerificationRecord,
    VerificationStatus,
    is_answer,
    normalize_url,
    optuna_storage,
    pareto_front,
    study_status,
)
from storage import verifications as all_verifications
from sweeper.answer import Answer, study_answer, tps_text, verify_command
from sweeper.errors import StudyError, SweeperError
from sweeper.manifest import Manifest, is_secret_name
from sweeper.measure import TimeByPhase, time_by_phase
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

# below this many measured trials an importance estimate is noise, and is not shown
MIN_IMPORTANCE_TRIALS = 5
# a trial's category on the plots: FAILED_TRIAL is a trial that measured nothing (not a failed verification)
FEASIBLE, INFEASIBLE, FAILED_TRIAL, RUNNING = "feasible", "infeasible", "failed", "running"
CATEGORIES = (FEASIBLE, INFEASIBLE, FAILED_TRIAL, RUNNING)
COLORS = {
    FEASIBLE: "#2a9d8f",
    INFEASIBLE: "#e76f51",
    FAILED_TRIAL: "#8d99ae",
    RUNNING: "#f4a261",
    "verified": "#1d3557",
    "verify-failed": "#9d0208",
    "cap": "#d62828",
    "winner": "#ffb703",
    "front": "#264653",
    "base": "#457b9d",
}
LABELS = {
    FEASIBLE: "feasible (PPL under the cap)",
    INFEASIBLE: "infeasible (PPL over the cap)",
    FAILED_TRIAL: "failed (no measurement; drawn at TPS 0)",
    RUNNING: "running",
}
IMPUTED = "TPS imputed, not measured"  # appended to a category's label for its imputed points


def percent(ratio: float) -> str:
    """A ratio as a signed change: 1.265 -> '+26.5 %'."""
    return f"{(ratio - 1.0) * 100.0:+.1f} %"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialPoint:
    """One trial as the plots draw it."""

    number: int
    state: str
    category: str
    role: str
    tps: float | None
    ppl: float | None
    params: Mapping[str, Any]
    verification: VerificationStatus | None
    tps_imputed: bool = False
    early_stopped: bool = False
    error: str | None = None
    seconds: float = 0.0

    def hover(self) -> str:
        lines = [f"trial #{self.number} ({self.role}): {self.category}"]
        if self.tps is not None:
            lines.append(f"TPS {self.tps:.2f}" + (f" ({IMPUTED})" if self.tps_imputed else ""))
        if self.ppl is not None:
            lines.append(f"PPL {self.ppl:.4f}" if math.isfinite(self.ppl) else "PPL inf")
        lines += [f"{k} = {v}" for k, v in self.params.items()]
        if self.verification:
            lines.append(f"verification: {self.verification}")
        if self.error:
            lines.append(f"error: {self.error[:120]}")
        return "<br>".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigurationPoint:
    """One gate-passing configuration as the plots draw it: at its TPS estimate, with its interval.

    ``tps``, ``low`` and ``high`` are ``Standing.tps_interval`` (the figure the
    study's claim rests on), never one server's reading; ``readings`` holds
    every server's (trial number, TPS), in trial order, for the faint dots.
    """

    first: int
    numbers: tuple[int, ...]
    ppl: float
    params: Mapping[str, Any]
    readings: tuple[tuple[int, float], ...]
    tps: float
    low: float
    high: float
    confidence: float
    method: str
    is_base: bool
    is_answer: bool
    # the trials whose readings the estimate is made of (the figures after selection when
    # there are any); a reading not counted is the one that picked the configuration for a race
    counted: tuple[int, ...] = ()

    @property
    def counted_readings(self) -> tuple[tuple[int, float], ...]:
        return tuple((n, v) for n, v in self.readings if n in self.counted)

    @property
    def uncounted_readings(self) -> tuple[tuple[int, float], ...]:
        return tuple((n, v) for n, v in self.readings if n not in self.counted)

    @property
    def level(self) -> str:
        return f"{self.confidence * 100:.0f} %"

    def interval_text(self) -> str:
        return f"{self.level} interval {self.low:.1f}-{self.high:.1f}"

    def tps_text(self) -> str:
        return tps_text(self.tps)

    def hover(self) -> str:
        role = " = the answer" if self.is_answer else ""
        role += " (the base manifest)" if self.is_base else ""
        lines = [
            f"configuration of trial #{self.first}{role}",
            f"TPS {self.tps:.2f} ({self.interval_text()})",
            f"{len(self.readings)} server(s): " + ", ".join(f"#{n} {v:.1f}" for n, v in self.readings),
            f"PPL {self.ppl:.4f}",
        ]
        lines += [f"{k} = {v}" for k, v in self.params.items()]
        return "<br>".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvChange:
    key: str
    base: str | None  # None: not set in the base manifest
    answer: str


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
        speedup = now.speedup if now is not None and self.answer.is_the_claim else None
        if speedup is None:
            return None
        level = now.basis.study_confidence if now.basis is not None else speedup.confidence
        return (
            f"{percent(speedup.value)} ({level * 100:.0f} % {percent(speedup.low).removesuffix(' %')} "
            f"to {percent(speedup.high).removesuffix(' %')})"
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


def confounded(configurations: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of settings that changed together in every configuration: each takes more
    than one value and each one's value fixes the other's, both ways. No importance can
    tell such settings' effects apart: every configuration changed both or neither."""
    distinct = list({json.dumps(dict(c), sort_keys=True, default=str): dict(c) for c in configurations}.values())
    names = sorted({name for config in distinct for name in config})
    varying = [n for n in names if len({repr(c.get(n)) for c in distinct}) > 1]
    pairs = []
    for index, a in enumerate(varying):
        for b in varying[index + 1 :]:
            both = {(repr(c.get(a)), repr(c.get(b))) for c in distinct}
            if len(both) == len({x for x, _ in both}) == len({y for _, y in both}):
                pairs.append((a, b))
    return pairs


def confounded_text(pairs: Sequence[tuple[str, str]], configurations: int) -> str:
    """Why importance is not drawn for ``pairs`` (``confounded``) over ``configurations``."""
    named = "; ".join(f"{a} and {b}" for a, b in pairs)
    return (
        f"not drawn: {named} changed together in all {configurations} configurations measured, "
        "so none of them separates their effects"
    )


def importance(url: str, study_name: str) -> tuple[dict[str, dict[str, float]], str]:
    """Importance of each parameter for reaching the best quarter of TPS, and of PPL.

    Optuna's PED-ANOVA evaluator (no scikit-learn needed), on measured values
    only: a trial whose TPS is a stand-in (stopped early or refused: the
    slowest TPS seen, told to the sampler) or that has no figure is left out
    of that target, so a stand-in cannot make a parameter look important.
    Nothing is computed where two settings changed together in every
    configuration measured (``confounded``): importance would split between
    them what no configuration can tell apart; the note says which.
    """
    import optuna

    storage = optuna_storage(url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
        complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
        result: dict[str, dict[str, float]] = {}
        counted: dict[str, int] = {}
        for target in ("tps", "ppl"):
            usable = [t for t in complete if _measured(t, target)]
            counted[target] = len(usable)
            if len(usable) < MIN_IMPORTANCE_TRIALS:
                continue
            pairs = confounded([t.params for t in usable])
            if pairs:
                configurations = len({json.dumps(t.params, sort_keys=True, default=str) for t in usable})
                return {}, confounded_text(pairs, configurations)
            sign = -1.0 if target == "tps" else 1.0  # PED-ANOVA ranks low values as good
            scratch = optuna.create_study(direction="minimize")  # in memory: the measured values only
            scratch.add_trials(
                optuna.trial.create_trial(
                    params=t.params, distributions=t.distributions, value=sign * float(t.user_attrs[target])
                )
                for t in usable
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = optuna.importance.get_param_importances(
                    scratch, evaluator=optuna.importance.PedAnovaImportanceEvaluator(target_quantile=0.25)
                )
            result[target] = {name: float(value) for name, value in values.items()}
        if not result and max(counted.values(), default=0) < MIN_IMPORTANCE_TRIALS:
            return {}, f"needs at least {MIN_IMPORTANCE_TRIALS} measured trials ({counted.get('tps', 0)} so far)"
        note = "" if result else "no parameter varied across the measured trials"
        return result, note
    except (RuntimeError, ValueError, ZeroDivisionError) as exc:
        logger.info("parameter importance not computed: %s", exc)
        return {}, f"not computed ({exc})"
    finally:
        storage.remove_session()


def _measured(trial: Any, target: str) -> bool:
    """Does the Optuna trial carry a measured, finite figure for ``target`` (not a stand-in)?"""
    value = trial.user_attrs.get(target)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return not (target == "tps" and trial.user_attrs.get(TPS_IMPUTED_ATTR))


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
