"""Run an ablation: every server of its schedule, stored as it ends, and the verdicts at the end.

Each slot of the schedule (``_schedule``) is one fresh server of the
manifest with that arm's env overrides (``AblationArms``), measured as a
study's trial is: the warm-up bridge, then TPS; in the first round also
PPL on the PPL records (every arm on the same records, so the PPL
comparison is paired) and greedy fidelity on the first ``fidelity_prompts``
prompts. The first base server writes the fidelity reference; every
switch's first server is compared with it, and the first block's second
base server too, as the control that tells whether the server reproduces
its own tokens at all. A server's row is stored as soon as it ends
(``storage.AblationStore``), so a crash or Ctrl-C loses no measured server
and the same command goes on from the next slot. A server that fails is
stored as failed with its failure kind and the schedule goes on.

When the verdicts export a manifest other than the original, the
ablation ends with the closing race of the two (``_closing``), its
servers stored the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from evaluators import DEFAULT_CONFIDENCE, PRIOR_SPREAD, FidelityResult, PairedPpl, paired_log_ppl
from storage import (
    ABLATION_FINISHED,
    ABLATION_INTERRUPTED,
    AblationRecord,
    AblationServer,
    AblationStore,
    ClosingServer,
)
from sweeper.ablation._closing import (
    DEFAULT_CLOSING_PAIRS,
    ClosingRace,
    changes_text,
    closing_race,
    compares_tokens,
    pair_order,
)
from sweeper.ablation._schedule import DEFAULT_BLOCK_SIZE, Slot, blocks, schedule
from sweeper.ablation._switches import AblationArms, AblationMode, Switch
from sweeper.ablation._verdict import SlotFigure, SwitchReport, TpsEffects, export_value, report_switches, tps_effects
from sweeper.errors import ERROR_ROOTS, USER_INPUT_ERRORS, ServerStartError, UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import EvalSettings, Measure, evaluate
from sweeper.serving import classify
from sweeper.study import record_rows

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationPlan:
    """What one ablation measures: its switches, mode and schedule, and how it judges them."""

    name: str
    mode: AblationMode
    switches: tuple[Switch, ...]
    rounds: int = 2
    block_size: int = DEFAULT_BLOCK_SIZE
    confidence: float = DEFAULT_CONFIDENCE
    prior_spread: float = PRIOR_SPREAD
    fidelity_prompts: int = 4
    allow_output_change: bool = False
    closing_pairs: int = DEFAULT_CLOSING_PAIRS  # 0: no closing race

    def __post_init__(self) -> None:
        if not self.name:
            raise UserInputError("--name: an ablation needs a name")
        if self.rounds < 1:
            raise UserInputError(f"--rounds must be at least 1, not {self.rounds}")
        if self.block_size < 1:
            raise UserInputError(f"--block-size must be at least 1, not {self.block_size}")
        if not 0.5 < self.confidence < 1.0:
            raise UserInputError(f"--confidence must be in (0.5, 1), not {self.confidence}")
        if self.fidelity_prompts < 1:
            raise UserInputError(f"--fidelity-prompts must be at least 1, not {self.fidelity_prompts}")
        if self.closing_pairs < 0 or self.closing_pairs == 1:
            raise UserInputError(
                f"--closing-pairs must be 0 (no closing race) or at least 2 (an interval), not {self.closing_pairs}"
            )

    @property
    def arms(self) -> AblationArms:
        return AblationArms(mode=self.mode, switches=self.switches)

    def stored_settings(self, eval_settings: EvalSettings) -> dict[str, Any]:
        """What a resumed ablation must share with the stored one (the rounds may grow)."""
        tps = eval_settings.tps
        return {
            "block_size": self.block_size,
            "confidence": self.confidence,
            "prior_spread": self.prior_spread,
            "fidelity_prompts": self.fidelity_prompts,
            "prompts": str(eval_settings.prompts) if eval_settings.prompts else None,
            "ppl_data": str(eval_settings.ppl_data) if eval_settings.ppl_data else None,
            "tps": None if tps is None else {"num_prompts": tps.num_prompts, "output_len": tps.output_len},
        }

    def overrides(self, slot: Slot) -> dict[str, str]:
        return self.arms.base_overrides() if slot.arm is None else self.arms.arm_overrides(slot.arm)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationResult:
    """An ablation's verdicts, with the figures they rest on."""

    name: str
    mode: AblationMode
    rounds: int
    servers: int
    failed_servers: int
    gpu_seconds: float
    effects: TpsEffects
    reports: tuple[SwitchReport, ...]
    control: FidelityResult | None
    allow_output_change: bool
    closing: ClosingRace | None = None  # None: not raced (nothing changed, or not measured yet)

    @property
    def changes(self) -> dict[str, str]:
        """What the exported manifest sets otherwise than the original: key -> value."""
        return exported_changes(self.reports, allow_output_change=self.allow_output_change)

    def export_env(self, manifest: Manifest) -> dict[str, str]:
        """The manifest's env with every switch set as its verdict says."""
        return {**manifest.env, **self.changes}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode.value,
            "rounds": self.rounds,
            "servers": self.servers,
            "failed_servers": self.failed_servers,
            "gpu_seconds": self.gpu_seconds,
            "level": self.effects.level,
            "spread": self.effects.spread.to_dict(),
            "control": self.control.to_dict() if self.control else None,
            "switches": [report.to_dict() for report in self.reports],
            "changes": self.changes,
            "closing": self.closing.to_dict() if self.closing is not None else None,
        }


def follow_up_switches(result: AblationResult, keep: int) -> tuple[Switch, ...]:
    """The ``keep`` switches whose TPS effect read farthest from 1 (in either direction), in the
    ablation's order: what a second stage re-measures in fresh servers. Only the first stage's
    figures choose; only the second stage's may judge the chosen, so the reading that chose them
    is not counted twice. A switch with no effect measured (its arm never ran) is not chosen."""
    if keep < 1:
        raise UserInputError(f"--keep must be at least 1, not {keep}")
    measured = [(index, r.switch, r.tps_effect) for index, r in enumerate(result.reports) if r.tps_effect is not None]
    if not measured:
        raise UserInputError(f"ablation {result.name!r} has no switch with a TPS effect to follow up")
    farthest = sorted(measured, key=lambda item: (-abs(math.log(item[2].value)), item[0]))[:keep]
    return tuple(switch for _, switch, _ in sorted(farthest, key=lambda item: item[0]))


def exported_changes(reports: tuple[SwitchReport, ...], *, allow_output_change: bool) -> dict[str, str]:
    """Each switch whose verdict exports another value than the manifest's: key -> that value.

    A value is never taken away: a switch's reference is unset only when
    the manifest lacks the key (``find_switches``), so an exported "unset"
    is the manifest's own.
    """
    changes = {}
    for report in reports:
        value = export_value(report.switch, report.verdict, allow_output_change=allow_output_change)
        if value is not None and value != report.switch.manifest_value:
            changes[report.switch.key] = value
    return changes


def run_ablation(
    manifest: Manifest,
    plan: AblationPlan,
    eval_settings: EvalSettings,
    *,
    url: str,
    workdir: str | Path,
    measure: Measure | None = None,
    progress: Callable[[str], None] | None = None,
) -> AblationResult:
    """Measure every slot of ``plan``'s schedule not stored yet, then judge every switch.

    ``measure`` (default: ``sweeper.measure.evaluate``, one fresh server a
    call) is where each server is started and measured. Ctrl-C, or an error
    that is not a server's, marks the ablation interrupted (its servers
    stay) and re-raises.
    """
    measure = measure or evaluate
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", plan.name)
    reference = workdir / f"{stem}.fidelity.json"
    slots = schedule(len(plan.switches), rounds=plan.rounds, block_size=plan.block_size)
    with AblationStore(url) as store:
        record = store.start(
            name=plan.name,
            mode=plan.mode.value,
            manifest=manifest.redacted().to_dict(),
            switches=[dataclasses.asdict(s) for s in plan.switches],
            settings=plan.stored_settings(eval_settings),
            run_options={"allow_output_change": plan.allow_output_change},
        )
        done = record.done_slots
        if done:
            _say(progress, f"ablation {plan.name}: {len(done)} of {len(slots)} servers stored, going on")
        try:
            for position, slot in enumerate(slots, start=1):
                if (slot.round, slot.block, slot.arm) in done:
                    continue
                arm_name = "base" if slot.arm is None else plan.switches[slot.arm].key.lower()
                log = workdir / f"{stem}-r{slot.round}-b{slot.block}-{arm_name}.log"
                settings = _slot_settings(plan, slot, eval_settings, reference, log)
                what = "base" if slot.arm is None else _arm_text(plan, slot.arm)
                _say(progress, f"server {position}/{len(slots)}: round {slot.round}, {what}")
                server = _measure_slot(manifest, slot, settings, measure, where=f"round {slot.round}, {what}")
                store.add_server(record.id, server)
                _say(progress, f"  {_describe(server)}")
            result = analyse(store.record(record.id), plan)
            if result.changes and plan.closing_pairs:
                _run_closing(
                    manifest, plan, result.changes, eval_settings, store, record.id, workdir / stem, measure, progress
                )
                result = analyse(store.record(record.id), plan)
            elif not result.changes:
                _say(progress, "the verdicts keep the manifest as it is: no closing race")
            else:
                _say(progress, f"no closing race (--closing-pairs 0) for the exported {changes_text(result.changes)}")
        except BaseException:  # Ctrl-C, or an error no server caused (bad data, the database)
            store.finish(record.id, status=ABLATION_INTERRUPTED, verdicts=None)
            raise
        store.finish(record.id, status=ABLATION_FINISHED, verdicts=[r.to_dict() for r in result.reports])
    return result


def close_ablation(
    manifest: Manifest,
    plan: AblationPlan,
    changes: dict[str, str],
    eval_settings: EvalSettings,
    *,
    url: str,
    workdir: str | Path,
    measure: Measure | None = None,
    progress: Callable[[str], None] | None = None,
) -> ClosingRace:
    """Race ``changes`` (the exported manifest: ``manifest`` with them) against ``manifest`` for
    stored ablation ``plan.name``, in ``plan.closing_pairs`` pairs of fresh servers; the servers
    already stored for these changes are not measured again. ``run_ablation`` ends with this for
    the changes its verdicts export."""
    if not changes or plan.closing_pairs < 2:
        raise UserInputError("a closing race needs changes to race and --closing-pairs of at least 2")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    stem = workdir / re.sub(r"[^A-Za-z0-9._-]+", "_", plan.name)
    with AblationStore(url) as store:
        record = store.find(plan.name)
        if record is None:
            raise UserInputError(f"no ablation {plan.name!r} is stored to close")
        _run_closing(manifest, plan, changes, eval_settings, store, record.id, stem, measure or evaluate, progress)
        raced = store.record(record.id).closing_for(changes)
    return closing_race(raced, changes, confidence=plan.confidence)


def _run_closing(
    manifest: Manifest,
    plan: AblationPlan,
    changes: dict[str, str],
    eval_settings: EvalSettings,
    store: AblationStore,
    ablation_id: int,
    stem: Path,
    measure: Measure,
    progress: Callable[[str], None] | None,
) -> None:
    """The closing race's servers not stored yet, each stored as it ends."""
    done = {server.slot for server in store.record(ablation_id).closing_for(changes)}
    reference = stem.with_name(f"{stem.name}.closing-fidelity.json")
    slots = [(pair, side) for pair in range(1, plan.closing_pairs + 1) for side in pair_order(pair)]
    text = changes_text(changes)
    stored = f", {len(done)} stored" if done else ""
    _say(
        progress,
        f"closing race: the exported manifest ({text}) against the original, {len(slots)} fresh servers{stored}",
    )
    for position, (pair, side) in enumerate(slots, start=1):
        if (pair, side) in done:
            continue
        first_original = (pair, side) == (1, "original")
        settings = dataclasses.replace(
            eval_settings,
            overrides=changes if side == "exported" else {},
            ppl=None,
            save_reference=reference if first_original else None,
            reference_prompts=plan.fidelity_prompts,
            fidelity_reference=reference if compares_tokens(pair, side) and reference.is_file() else None,
            log_path=stem.with_name(f"{stem.name}-closing-p{pair}-{side}.log"),
        )
        _say(progress, f"closing server {position}/{len(slots)}: pair {pair}, {side}")
        measured = _measure_slot(manifest, Slot(pair, 0, None), settings, measure, where=f"closing pair {pair}, {side}")
        server = ClosingServer(
            changes=changes,
            pair=pair,
            side=side,
            state=measured.state,
            tps=measured.tps,
            fidelity=measured.fidelity,
            error_kind=measured.error_kind,
            error_message=measured.error_message,
            seconds=measured.seconds,
        )
        store.add_closing(ablation_id, server)
        _say(progress, f"  {_describe(measured)}")


def plan_from_record(record: AblationRecord) -> AblationPlan:
    """The plan a stored ablation was measured with, to its last stored round (for status)."""
    settings = record.settings
    options = settings.get("run_options") or {}
    return AblationPlan(
        name=record.name,
        mode=AblationMode(record.mode),
        switches=tuple(Switch(**dict(s)) for s in record.switches),
        rounds=max((s.round for s in record.servers), default=1),
        block_size=int(settings.get("block_size", DEFAULT_BLOCK_SIZE)),
        confidence=float(settings.get("confidence", DEFAULT_CONFIDENCE)),
        prior_spread=float(settings.get("prior_spread", PRIOR_SPREAD)),
        fidelity_prompts=int(settings.get("fidelity_prompts", 4)),
        allow_output_change=bool(options.get("allow_output_change", False)),
        closing_pairs=max(2, *(s.pair for s in record.closing)) if record.closing else 0,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredAblation:
    """A stored ablation judged as it stands: its plan to the last stored round, its verdicts, and
    how many servers that plan's schedule holds (what ``status`` and ``report`` show)."""

    record: AblationRecord
    plan: AblationPlan
    result: AblationResult
    planned_servers: int


def judge_stored(record: AblationRecord) -> StoredAblation:
    """``record`` judged from the servers stored so far (a running or interrupted one's too)."""
    plan = plan_from_record(record)
    planned = len(schedule(len(plan.switches), rounds=plan.rounds, block_size=plan.block_size))
    return StoredAblation(record=record, plan=plan, result=analyse(record, plan), planned_servers=planned)


def analyse(record: AblationRecord, plan: AblationPlan) -> AblationResult:
    """The verdicts of a stored ablation (its servers up to ``plan.rounds``)."""
    servers = [s for s in record.servers if s.round <= plan.rounds]
    figures = [
        SlotFigure(
            slot=Slot(s.round, s.block, s.arm),
            tps=s.tps if s.state == "complete" and s.tps else None,
            failure=s.error_kind,
        )
        for s in servers
    ]
    effects = tps_effects(
        figures,
        plan.switches,
        plan.mode,
        block_size=plan.block_size,
        confidence=plan.confidence,
        prior=plan.prior_spread,
    )
    by_slot = {(s.round, s.block, s.arm): s for s in servers}
    ppl: dict[int, PairedPpl | None] = {}
    fidelity: dict[int, FidelityResult | None] = {}
    for block_index, members in enumerate(blocks(len(plan.switches), plan.block_size)):
        base = by_slot.get((1, block_index, None))
        for index in members:
            arm = by_slot.get((1, block_index, index))
            fidelity[index] = FidelityResult.from_dict(arm.fidelity) if arm is not None and arm.fidelity else None
            if arm is None or base is None:
                ppl[index] = None
                continue
            arm_scores, base_scores = record_rows(arm.ppl_scores), record_rows(base.ppl_scores)
            if plan.switches[index].effect_sign(plan.mode) > 0:
                ppl[index] = paired_log_ppl(arm_scores, base_scores)
            else:
                ppl[index] = paired_log_ppl(base_scores, arm_scores)
    control_server = by_slot.get((2, 0, None))
    control = (
        FidelityResult.from_dict(control_server.fidelity)
        if control_server is not None and control_server.fidelity
        else None
    )
    reports = report_switches(effects, plan.switches, ppl=ppl, fidelity=fidelity, control=control)
    changes = exported_changes(reports, allow_output_change=plan.allow_output_change)
    raced = record.closing_for(changes) if changes else ()
    return AblationResult(
        name=record.name,
        mode=plan.mode,
        rounds=plan.rounds,
        servers=len(servers),
        failed_servers=sum(s.state != "complete" for s in servers),
        gpu_seconds=sum(s.seconds for s in servers),
        effects=effects,
        reports=reports,
        control=control,
        allow_output_change=plan.allow_output_change,
        closing=closing_race(raced, changes, confidence=plan.confidence) if raced else None,
    )


def _slot_settings(plan: AblationPlan, slot: Slot, base: EvalSettings, reference: Path, log: Path) -> EvalSettings:
    first_base = slot.round == 1 and slot.block == 0 and slot.arm is None
    compares = (slot.round == 1 and slot.arm is not None) or (slot.round == 2 and slot.block == 0 and slot.arm is None)
    return dataclasses.replace(
        base,
        overrides=plan.overrides(slot),
        ppl=base.ppl if slot.round == 1 else None,
        save_reference=reference if first_base else None,
        reference_prompts=plan.fidelity_prompts,
        fidelity_reference=reference if compares and reference.is_file() else None,
        tps_after_failed_gate=True,
        log_path=log,
    )


class _SlotFields(TypedDict):
    """What an ablation server's record takes from its slot, failed or complete."""

    round: int
    block: int
    arm: int | None
    overrides: dict[str, str]


def _measure_slot(
    manifest: Manifest, slot: Slot, settings: EvalSettings, measure: Measure, *, where: str
) -> AblationServer:
    """One server's figures; ``where`` names it in the warning a failed start logs
    ("round 2, ENFORCE_EAGER=0 (switch ...)", "closing pair 1, exported")."""
    began = time.monotonic()
    common = _SlotFields(round=slot.round, block=slot.block, arm=slot.arm, overrides=dict(settings.overrides))
    try:
        result = measure(manifest, settings)
    except (*ERROR_ROOTS, OSError) as exc:
        if isinstance(exc, USER_INPUT_ERRORS):
            raise
        log_tail = getattr(exc, "log_tail", "") or ""
        kind = classify(log_tail, exc, during_start=isinstance(exc, ServerStartError))
        logger.warning("ablation server (%s) failed: %s", where, exc)
        return AblationServer(
            **common,
            state="failed",
            error_kind=str(kind.value),
            error_message=str(exc),
            log_tail=log_tail or None,
            seconds=time.monotonic() - began,
        )
    tps = result.tps.tps if result.tps is not None else None
    ok = tps is not None and result.tps is not None and result.tps.ok
    return AblationServer(
        **common,
        state="complete" if ok else "failed",
        tps=tps if ok else None,
        ppl=result.ppl.ppl if result.ppl is not None else None,
        # in the shape of a trial's per-record rows, so that ``record_rows`` pairs them
        ppl_scores=[{"kind": "ppl", **s.to_dict()} for s in result.ppl.scores] if result.ppl is not None else [],
        fidelity=result.fidelity.to_dict() if result.fidelity is not None else None,
        error_kind=None if ok else "measurement",
        error_message=None if ok else (result.tps.first_error if result.tps else "no TPS measured"),
        phases={k: float(v) for k, v in result.timings.items()},
        seconds=time.monotonic() - began,
    )


def _arm_text(plan: AblationPlan, arm: int) -> str:
    """What the arm's server runs with: ``ENFORCE_EAGER=0`` for a flag the manifest sets to 1."""
    switch = plan.switches[arm]
    return f"{switch.key}={switch.arm_value(plan.mode)} (switch {switch.label})"


def _describe(server: AblationServer) -> str:
    if server.state != "complete":
        return f"failed ({server.error_kind}): {server.error_message}"
    parts = [f"{server.tps:.1f} tok/s"]
    if server.ppl is not None:
        parts.append(f"PPL {server.ppl:.4f}")
    if server.fidelity:
        parts.append(f"{server.fidelity['identical']}/{server.fidelity['compared']} identical")
    return ", ".join(parts) + f" ({server.seconds:.0f} s)"


def _say(progress: Callable[[str], None] | None, line: str) -> None:
    if progress is None:
        logger.info("%s", line)
    else:
        progress(line)
