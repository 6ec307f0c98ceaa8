"""``sweeper status``: a study's trials by state, its best feasible trial and its Pareto set."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from storage import (
    StudyStatus,
    TrialRecord,
    TrialStore,
    normalize_url,
    pareto_front,
    stored_ablation,
    study_status,
)
from sweeper.cli._options import storage_option, study_option
from sweeper.errors import UserInputError
from sweeper.measure import phase_headline, phase_rows, time_by_phase
from sweeper.study import (
    ConfirmSettings,
    Outcome,
    PplStatement,
    Standing,
    ppl_statement,
    probability_text,
    recipe_from_settings,
)
from sweeper.sweep import demo_data

LOG_TAIL_LINES = 20


def _number(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def _params(params: Any) -> str:
    return ", ".join(f"{key}={value}" for key, value in dict(params).items())


def _settings_line(status: StudyStatus) -> str:
    settings = status.settings
    if settings.get("ppl_cap_rel") is not None:
        gate = f"PPL <= {settings['ppl_cap_rel']:g} x baseline"
        if settings.get("reference_ppl") is not None:
            gate += f" ({settings['ppl_cap_rel'] * settings['reference_ppl']:.4f})"
    elif settings.get("ppl_cap") is not None:
        gate = f"PPL <= {settings['ppl_cap']:g}"
    else:
        gate = "no gate recorded"
    if settings.get("ppl_confidence") is not None:  # judged on the upper bound, not the estimate
        rerun = settings.get("ppl_rerun_records")
        gate += (
            f" at {settings['ppl_confidence'] * 100:g} % confidence on "
            f"{f'{rerun} new records' if rerun else 'as many new records'}"
        )
    return f"mode {settings.get('mode', '?')}, gate {gate}, space {settings.get('space', '?')}"


def recipe_lines(status: StudyStatus) -> list[str]:
    """How the study measures (its recorded recipe): sizes, data and the held-out split."""
    if status.settings.get("recipe") is None:
        return []  # a study made outside 'sweeper run' (run_study from Python)
    recipe = recipe_from_settings(status.settings)
    counts = recipe.data_counts

    bridge = recipe.warmup_prompts
    bridge_text = "manifest default" if bridge is None else "off" if bridge == 0 else f"{bridge} prompts"
    sizes = (
        f"sizes: {recipe.num_prompts or '-'} prompts x {recipe.output_len or '-'} tokens, "
        f"{'-' if recipe.warmup_requests is None else recipe.warmup_requests} warm-up requests, "
        f"warm-up bridge {bridge_text}, "
        f"PPL records {'all' if recipe.ppl_records is None else recipe.ppl_records}"
    )
    tuning = f"tuning data: prompts {recipe.prompts or 'demo'}"
    if "prompts" in counts:
        tuning += f" ({counts['prompts']})"
    tuning += f", PPL {recipe.ppl_data or 'demo'}"
    if "ppl_records" in counts:
        tuning += f" ({counts['ppl_records']} records)"
    lines = [sizes, tuning]
    heldout = []
    for kind, given, key in (
        ("prompts", recipe.heldout_prompts, "heldout_prompts"),
        ("ppl_data", recipe.heldout_ppl_data, "heldout_ppl_records"),
    ):
        split = recipe.split_of(kind)
        label = "prompts" if kind == "prompts" else "PPL"
        if given:
            where = given
        elif split is not None:
            where = f"{split[0]:g} split off the tuning set (seed {split[1]})"
        else:
            where = "demo" if recipe.tunes_on(demo_data()) else "none recorded"
        if key in counts:
            where += f" ({counts[key]}{' records' if kind == 'ppl_data' else ''})"
        heldout.append(f"{label} {where}")
    lines.append("held-out data: " + "; ".join(heldout))
    server = []
    if recipe.ready_timeout_s is not None:
        server.append(f"ready timeout {recipe.ready_timeout_s:g} s")
    if recipe.server_python:
        server.append(f"server python {recipe.server_python}")
    if recipe.keep_port:
        server.append("the manifest's own port")
    if server:
        lines.append("servers: " + ", ".join(server))
    return lines


def print_trial_table(
    console: Console, title: str, records: tuple[TrialRecord, ...], settings: dict[str, Any] | None = None
) -> None:
    """The trial table, one line per row at the console's width (a file is 80 columns).

    When the params do not fit beside the figures, the table leaves them out and
    one line per trial below it names them: never a params cell folded over lines.
    """
    table = _trial_table(title, records, settings)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    console.print(_trial_table(title, records, settings, params=False))
    for record in records:
        console.print(f"  trial {record.number}: {_params(record.params)}", markup=False, highlight=False)


def _trial_table(
    title: str, records: tuple[TrialRecord, ...], settings: dict[str, Any] | None = None, *, params: bool = True
) -> Table:
    """Trials with TPS, PPL and cap; with the PPL's interval and re-run chance where known."""
    statements = {r.number: ppl_statement(r.ppl, r.extras, r.ppl_cap, settings or {}) for r in records}
    uncertain = any(s is not None and s.known for s in statements.values())
    table = Table(title=title, title_justify="left")
    columns = [("trial", "right"), ("TPS", "right"), ("PPL", "right")]
    if uncertain:
        columns += [("PPL 95 %", "right"), ("P(pass)", "right")]
    columns += [("cap", "right")] + ([("params", "left")] if params else [])
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for record in records:
        row = [str(record.number), _number(record.tps, 2), _number(record.ppl, 4)]
        if uncertain:
            row += _uncertainty_cells(statements[record.number])
        row.append(_number(record.ppl_cap, 4))
        table.add_row(*row, *([_params(record.params)] if params else []))
    if uncertain:
        reruns = sorted({s.rerun_records for s in statements.values() if s and s.rerun_records})
        table.caption = (
            "PPL 95 %: the interval of the records' PPL; P(pass): the chance that a re-run on "
            f"{'/'.join(map(str, reruns)) or 'as many'} new records of this kind is under the cap"
        )
        if any(s and s.paired for s in statements.values()):
            table.caption += ", judged against the baseline on the same records"
        elif any(s and s.baseline_noise for s in statements.values()):
            table.caption += ", the baseline's record noise included"
    return table


def _uncertainty_cells(statement: PplStatement | None) -> list[str]:
    if statement is None or not statement.known:
        return ["-", "-"]
    assert statement.low is not None and statement.high is not None
    chance = statement.pass_probability
    return [
        f"{statement.low:.4f}-{statement.high:.4f}",
        "-" if chance is None else probability_text(chance),
    ]


def answer_ppl_line(status: StudyStatus, number: int) -> str | None:
    """``PPL of trial 3: PPL 2.1502 (95 % interval ...); on 16 new records ...`` (None: no figures)."""
    record = next((r for r in status.trials if r.number == number), None)
    if record is None:
        return None
    statement = ppl_statement(record.ppl, record.extras, record.ppl_cap, status.settings)
    if statement is None or not statement.known:
        return None
    return f"PPL of trial {number}: {statement.text()}"


def running_devices(status: StudyStatus) -> list[str]:
    """One line per running trial: where its server runs (host, GPUs, CPU cores).

    The worker stores its devices with the running trial (``extras["device"]``,
    see ``sweeper.devices.DeviceSlot.describe``); trials without them show the host only.
    """
    from sweeper.devices import describe_device

    return [
        f"  running: trial {record.number} on {record.host} (pid {record.pid}): "
        + describe_device(record.extras.get("device"))
        for record in status.trials
        if record.state == "running"
    ]


def phase_lines(status: StudyStatus) -> list[str]:
    """The study's server time by phase: a headline and one aligned line a phase (fits 80 columns)."""
    time = time_by_phase(status.trials, list(status.verifications.values()))
    if not time.phases:
        return []
    rows = phase_rows(time)
    width = max(len(row[0]) for row in rows)
    lines = ["time: " + phase_headline(time)]
    lines += [f"  {label:<{width}}  {spent:>11}  {share:>6}  {per:>8} a server" for label, spent, share, per in rows]
    return lines


def show_status(console: Console, status: StudyStatus) -> None:
    counts = status.counts
    console.print(f"study {status.study_name} in {status.url}")
    console.print(_settings_line(status))
    for line in recipe_lines(status):
        console.print(line, markup=False, highlight=False)
    console.print(
        f"trials: {counts['COMPLETE']} complete ({counts['feasible']} pass the gate, "
        f"{counts['infeasible']} fail it), {counts['FAIL']} failed, {counts['RUNNING']} running, "
        f"{counts['WAITING']} queued"
    )
    from sweeper.answer import ServerCount

    servers = ServerCount.of(status.trials, status.verifications.values())
    console.print(f"servers: {servers.servers} ({', '.join(servers.parts(every=True))})")
    for line in running_devices(status):
        console.print(line, markup=False)
    for line in phase_lines(status):
        console.print(line, markup=False, highlight=False)
    best = status.best
    if best is None:
        console.print("best: none yet (no trial has passed the gate)")
        return
    from sweeper.answer import study_answer

    answer = study_answer(status.trials, status.verifications, ConfirmSettings.from_settings(status.settings))
    lines = standing_lines(answer.standing)
    incumbent = answer.standing.incumbent if answer.standing is not None else None
    ppl_line = answer_ppl_line(status, incumbent.first) if incumbent is not None else None
    if ppl_line is not None:
        lines.insert(1, ppl_line)  # right under the best
    for line in lines:
        console.print(line, markup=False, highlight=False)
    pareto = _configuration_pareto(status, answer.standing)
    print_trial_table(console, "Pareto set (TPS up, PPL down; gate-passing configurations)", pareto, status.settings)
    if status.verifications:  # sweeper verify: re-measured on held-out data
        from sweeper.cli.verify_cmd import failure_lines, heldout_ppl_lines, verification_table

        verifications = list(status.verifications.values())
        console.print(verification_table(verifications, title="verification on held-out data"))
        for line in failure_lines(verifications):
            console.print(line, markup=False)
        for line in heldout_ppl_lines(verifications, status.settings):
            console.print(line, markup=False, highlight=False)
    else:
        from sweeper.answer import verify_command

        console.print(
            f"verification: none yet: '{verify_command(status.study_name, status.url)}' re-measures "
            "the best on held-out data",
            markup=False,
            highlight=False,
        )
    console.print(f"answer: {answer.describe()}", markup=False, highlight=False)


def _configuration_pareto(status: StudyStatus, now: Standing | None) -> tuple[TrialRecord, ...]:
    """The Pareto set of configurations (TPS: each one's geometric mean), one trial each.

    Re-measurements make several trials of one configuration; the table
    shows each configuration once, by the trial that found it, with its
    estimate, so a lucky re-measurement is not listed as a configuration
    of its own.
    """
    if now is None:
        return status.pareto
    by_number = {r.number: r for r in status.trials}
    return tuple(
        pareto_front(dataclasses.replace(by_number[c.first], tps=now.tps_interval(c).value) for c in now.configurations)
    )


def standing_lines(now: Standing | None) -> list[str]:
    """The study's claim: its confirmed best, the speedup over the base, the noise behind it.

    Each configuration is stated at its one figure (``Standing.tps_interval``); its
    readings follow, the ones not counted marked, and the base's figure is the one the
    answer's divides to the claim (the same rounds).
    """
    if now is None or now.incumbent is None:
        return []
    inc = now.incumbent
    estimate = now.tps_interval(inc)
    lines = [
        f"best: trial {inc.first}: TPS {estimate.value:.2f} ({_figure_basis(now, inc)}), "
        f"PPL {inc.ppl:.4f} (cap {inc.ppl_cap:.4f}), {_params(inc.params)}",
        f"claim: {now.describe()}",
    ]
    if now.basis is not None:
        lines.append(f"claim rests on: {now.basis.describe()}")
    lines.append(f"noise: between-server spread {now.spread.relative:.1%} (SD of log TPS; {now.spread.method})")
    if now.prior_text:
        lines.append(f"noise prior: {now.prior_text}")
    if now.base is not None and now.base.key != inc.key:
        base = now.tps_interval(now.base)
        line = f"base manifest: trial {now.base.first}: TPS {base.value:.2f} ({_figure_basis(now, now.base)})"
        speedup = now.speedup
        if speedup is not None and now.basis is not None:
            line += f"; {estimate.value:.2f} / {base.value:.2f} = {_percent(speedup.value)}, the claim"
        lines.append(line)
    for decision in now.decisions:
        # a contender screened out at once was never raced; one that fell behind
        # after a round was, and its round is shown
        if decision.outcome is not Outcome.SCREENED or decision.rounds > 0:
            lines.append(f"race: {decision.describe()}")
    return lines


def _percent(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100.0:+.1f} %"


def _figure_basis(now: Standing, config: Any) -> str:
    """What a configuration's figure is made of, and its readings with the ones not counted marked."""
    counted = now.counted(config)
    n = len(counted)
    if now.basis is not None and config.key in (now.incumbent.key, now.base.key):
        what = f"geometric mean of the claim's {n} round{'s' if n != 1 else ''}"
    elif n < len(config.tps):
        what = f"geometric mean of {n} server{'s' if n != 1 else ''} after selection"
    elif n > 1:
        what = f"geometric mean of {n} servers"
    else:
        return "one server"
    return f"{what}; every reading: {reading_list(now, config)}"


def reading_list(now: Standing, config: Any) -> str:
    """``141.0 (selected it: not counted), 125.2, 123.9``: a configuration's readings in trial order."""
    counted = set(now.counted(config))
    selected = set(now.basis.excluded) if now.basis is not None else set()
    selected |= {n for n in config.numbers if n not in config.confirmed}
    parts = []
    for number, value in config.readings:
        if number in counted:
            parts.append(f"{value:.1f}")
        elif number in selected and not config.is_base:
            parts.append(f"{value:.1f} (selected it: not counted)")
        else:
            parts.append(f"{value:.1f} (outside the claim's rounds: not counted)")
    return ", ".join(parts)


def configuration_figure(now: Standing | None, number: int) -> dict[str, Any] | None:
    """Trial ``number``'s configuration's one TPS figure, and whether this trial's reading is
    among those it is made of (None: the trial is not of a gate-passing configuration)."""
    config = now.configuration_of(number) if now is not None else None
    if now is None or config is None:
        return None
    interval = now.tps_interval(config)
    counted = now.counted(config)
    return {
        "trial": config.first,
        "tps": interval.value,
        "tps_interval": interval.to_dict(),
        "counted": list(counted),
        "this_reading_counted": number in counted,
        "text": f"TPS {interval.value:.2f} ({_figure_basis(now, config)})",
    }


def show_trial(
    console: Console, record: TrialRecord, settings: dict[str, Any] | None = None, now: Standing | None = None
) -> None:
    console.print(f"trial {record.number} of {record.study_name}: {record.state} ({record.role})")
    console.print(f"params: {_params(record.params)}")
    if record.overrides:
        console.print(f"env overrides: {json.dumps(dict(record.overrides))}")
    if record.tps is not None or record.ppl is not None:
        verdict = "passes the gate" if record.feasible else "fails the gate"
        extra = []
        if record.ppl_reused_from is not None:
            extra.append(f"PPL reused from trial {record.ppl_reused_from}")
        if record.tps_imputed:
            extra.append("TPS not measured (stopped early)")
        console.print(
            f"TPS {_number(record.tps, 2)} (this server's reading), PPL {_number(record.ppl, 4)} "
            f"(cap {_number(record.ppl_cap, 4)}): {verdict}" + (f"; {'; '.join(extra)}" if extra else "")
        )
        figure = configuration_figure(now, record.number)
        if figure is not None:
            counted = "is one of those it is made of" if figure["this_reading_counted"] else "is not counted"
            console.print(
                f"configuration of trial {figure['trial']}: {figure['text']}; this reading {counted}",
                markup=False,
                highlight=False,
            )
        statement = ppl_statement(record.ppl, record.extras, record.ppl_cap, settings or {})
        if statement is not None and statement.known:
            console.print(statement.text(), markup=False, highlight=False)
        low, high = record.extras.get("tps_low"), record.extras.get("tps_high")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            console.print(
                f"TPS 95 % interval within this server: {low:.2f}-{high:.2f} "
                f"({record.extras.get('tps_interval', 'bootstrap over requests')}); a fresh "
                f"server moves it by the between-server spread (see the study's 'noise' line)"
            )
    if record.error_kind:
        console.print(f"error: {record.error_kind}: {record.error_message}")
    if record.phases:
        console.print("phases: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in record.phases))
    if record.requests:
        console.print(f"per-request rows: {len(record.requests)}")
    console.print(f"worker: pid {record.pid} on {record.host}; server token {record.server_token or '-'}")
    if record.log_tail:
        lines = record.log_tail.splitlines()[-LOG_TAIL_LINES:]
        console.print(f"server log, last {len(lines)} lines:", markup=False)
        console.print("\n".join(lines), markup=False, highlight=False)


@click.command("status")
@study_option()
@storage_option()
@click.option("--trial", "trial_number", type=int, default=None, help="Show one trial in detail.")
@click.option("--ablation", "ablation_name", metavar="NAME", help="Show a stored ablation (sweeper ablate) instead.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def command(
    study_name: str | None, storage: str, trial_number: int | None, ablation_name: str | None, as_json: bool
) -> None:
    """Show a study: trials by state, the best gate-passing trial and the Pareto set.

    With --trial N, one trial in detail: its params and env overrides, TPS
    and PPL against the cap, the error of a failed trial, phase timings and
    the tail of its server log. With --ablation NAME, an ablation's verdicts
    from the servers stored so far (a running one's too).
    """
    if ablation_name is not None:
        show_ablation(Console(soft_wrap=True), storage, ablation_name, as_json=as_json)
        return
    status = study_status(storage, study_name)
    console = Console(soft_wrap=True)
    if trial_number is not None:
        numbers = sorted(record.number for record in status.trials)
        if trial_number not in numbers:
            stored = f"trials {numbers[0]} to {numbers[-1]}" if numbers else "no trial yet"
            raise UserInputError(f"--trial {trial_number}: study {status.study_name!r} has no such trial ({stored})")
        store = TrialStore(normalize_url(storage))
        try:
            record = store.record(status.study_name, trial_number)
        finally:
            store.close()
        from sweeper.answer import study_answer

        now = study_answer(status.trials, {}, ConfirmSettings.from_settings(status.settings)).standing
        if as_json:
            data = record.to_dict()
            data["requests"] = len(record.requests)
            data["configuration"] = configuration_figure(now, record.number)
            click.echo(json.dumps(data, default=str))
        else:
            show_trial(console, record, status.settings, now)
        return
    if as_json:
        from sweeper.answer import study_answer, study_data

        answer = study_answer(status.trials, status.verifications, ConfirmSettings.from_settings(status.settings))
        data = study_data(status, answer)
        record = answer.record
        statement = (
            None if record is None else ppl_statement(record.ppl, record.extras, record.ppl_cap, status.settings)
        )
        data["answer_ppl"] = statement.to_dict() if statement is not None else None
        data["time_by_phase"] = time_by_phase(status.trials, list(status.verifications.values())).to_dict()
        click.echo(json.dumps(data, default=str))
        return
    show_status(console, status)


def show_ablation(console: Console, storage: str, name: str, *, as_json: bool) -> None:
    """An ablation's servers so far and the verdicts they give (``sweeper status --ablation``)."""
    from sweeper.ablation import judge_stored
    from sweeper.cli._ablation_view import print_ablation

    record = stored_ablation(storage, name)
    stored = judge_stored(record)
    plan, result, planned = stored.plan, stored.result, stored.planned_servers
    if as_json:
        data = result.to_dict()
        data.update(status=record.status, planned_servers=planned, verdicts_stored=record.verdicts is not None)
        click.echo(json.dumps(data, default=str))
        return
    console.print(
        f"ablation {record.name}: {record.status}, {len(record.servers)} of {planned} servers of "
        f"{plan.rounds} round(s) stored, started {record.started_at:%Y-%m-%d %H:%M} UTC"
    )
    print_ablation(console, result)
