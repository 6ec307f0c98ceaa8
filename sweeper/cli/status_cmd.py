"""``sweeper status``: a study's trials by state, its best feasible trial and its Pareto set."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from storage import StudyStatus, TrialRecord, TrialStore, normalize_url, stored_ablation, study_status
from sweeper.ablation import judge_stored
from sweeper.answer import study_answer, study_data
from sweeper.cli._ablation_view import print_ablation
from sweeper.cli._options import json_option, storage_option, study_option
from sweeper.cli._standing_view import configuration_figure
from sweeper.cli._study_view import show_status
from sweeper.cli._trial_view import show_trial
from sweeper.errors import UserInputError
from sweeper.measure import time_by_phase
from sweeper.study import ConfirmSettings, ppl_statement


@click.command("status")
@study_option()
@storage_option()
@click.option("--trial", "trial_number", type=int, default=None, help="Show one trial in detail.")
@click.option("--ablation", "ablation_name", metavar="NAME", help="Show a stored ablation (sweeper ablate) instead.")
@json_option(help="Print JSON instead of tables.")
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
    if trial_number is not None:
        show_one_trial(status, _stored_trial(status, storage, trial_number), as_json=as_json)
    elif as_json:
        click.echo(json.dumps(status_json(status), default=str))
    else:
        show_status(Console(soft_wrap=True), status)


def _stored_trial(status: StudyStatus, storage: str, number: int) -> TrialRecord:
    """Trial ``number`` of the study, read in full (a number the study has not is a user error)."""
    numbers = sorted(record.number for record in status.trials)
    if number not in numbers:
        stored = f"trials {numbers[0]} to {numbers[-1]}" if numbers else "no trial yet"
        raise UserInputError(f"--trial {number}: study {status.study_name!r} has no such trial ({stored})")
    store = TrialStore(normalize_url(storage))
    try:
        record = store.record(status.study_name, number)
    finally:
        store.close()
    assert record is not None, f"trial {number} is among the study's trials just read"
    return record


def show_one_trial(status: StudyStatus, record: TrialRecord, *, as_json: bool) -> None:
    """``sweeper status --trial N``: the trial in detail, with its configuration's one figure."""
    now = study_answer(status.trials, {}, ConfirmSettings.from_settings(status.settings)).standing
    if as_json:
        data = record.to_dict()
        data["requests"] = len(record.requests)
        data["configuration"] = configuration_figure(now, record.number)
        click.echo(json.dumps(data, default=str))
    else:
        show_trial(Console(soft_wrap=True), record, status.settings, now)


def status_json(status: StudyStatus) -> dict[str, Any]:
    """``sweeper status --json``: the study's data, the answer's PPL statement, the time by phase."""
    answer = study_answer(status.trials, status.verifications, ConfirmSettings.from_settings(status.settings))
    data = study_data(status, answer)
    record = answer.record
    statement = None if record is None else ppl_statement(record.ppl, record.extras, record.ppl_cap, status.settings)
    data["answer_ppl"] = statement.to_dict() if statement is not None else None
    data["time_by_phase"] = time_by_phase(status.trials, list(status.verifications.values())).to_dict()
    return data


def show_ablation(console: Console, storage: str, name: str, *, as_json: bool) -> None:
    """An ablation's servers so far and the verdicts they give (``sweeper status --ablation``)."""
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
