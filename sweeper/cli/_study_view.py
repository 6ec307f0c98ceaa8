"""How a study reads in ``sweeper status``: its settings and recipe, its trials and servers, where
the time went, its standing, the Pareto set, the verifications and the answer."""

from __future__ import annotations

from rich.console import Console

from storage import StudyStatus
from sweeper.answer import ServerCount, configuration_pareto, study_answer, verify_command
from sweeper.cli._standing_view import answer_ppl_line, standing_lines
from sweeper.cli._trial_view import print_trial_table
from sweeper.cli._verification_view import failure_lines, heldout_ppl_lines, verification_table
from sweeper.devices import describe_device
from sweeper.measure import phase_headline, phase_rows, time_by_phase
from sweeper.study import ConfirmSettings, recipe_from_settings
from sweeper.sweep import demo_data


def settings_line(status: StudyStatus) -> str:
    """The study's mode, gate (with its confidence) and space."""
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


def running_devices(status: StudyStatus) -> list[str]:
    """One line per running trial: where its server runs (host, GPUs, CPU cores).

    The worker stores its devices with the running trial (``extras["device"]``,
    see ``sweeper.devices.DeviceSlot.describe``); trials without them show the host only.
    """
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
    """The whole study, as ``sweeper status`` prints it."""
    counts = status.counts
    console.print(f"study {status.study_name} in {status.url}")
    console.print(settings_line(status))
    for line in recipe_lines(status):
        console.print(line, markup=False, highlight=False)
    console.print(
        f"trials: {counts['COMPLETE']} complete ({counts['feasible']} pass the gate, "
        f"{counts['infeasible']} fail it), {counts['FAIL']} failed, {counts['RUNNING']} running, "
        f"{counts['WAITING']} queued"
    )
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
    answer = study_answer(status.trials, status.verifications, ConfirmSettings.from_settings(status.settings))
    lines = standing_lines(answer.standing)
    incumbent = answer.standing.incumbent if answer.standing is not None else None
    ppl_line = answer_ppl_line(status, incumbent.first) if incumbent is not None else None
    if ppl_line is not None:
        lines.insert(1, ppl_line)  # right under the best
    for line in lines:
        console.print(line, markup=False, highlight=False)
    pareto = configuration_pareto(status, answer.standing)
    print_trial_table(console, "Pareto set (TPS up, PPL down; gate-passing configurations)", pareto, status.settings)
    if status.verifications:  # sweeper verify: re-measured on held-out data
        verifications = list(status.verifications.values())
        console.print(verification_table(verifications, title="verification on held-out data"))
        for line in failure_lines(verifications):
            console.print(line, markup=False)
        for line in heldout_ppl_lines(verifications, status.settings):
            console.print(line, markup=False, highlight=False)
    else:
        console.print(
            f"verification: none yet: '{verify_command(status.study_name, status.url)}' re-measures "
            "the best on held-out data",
            markup=False,
            highlight=False,
        )
    console.print(f"answer: {answer.describe()}", markup=False, highlight=False)
