"""``sweeper ablate MANIFEST``: which switches of a manifest help, and whether they keep the outputs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click
from rich.console import Console

from evaluators import DEFAULT_CONFIDENCE, PplSettings, TpsSettings
from storage import stored_ablation
from sweeper.ablation import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_CLOSING_PAIRS,
    AblationMode,
    AblationPlan,
    AblationResult,
    Switch,
    effect_text,
    find_switches,
    follow_up_switches,
    judge_stored,
    run_ablation,
    servers_per_round,
)
from sweeper.answer import place_manifest
from sweeper.cli._ablation_view import print_ablation
from sweeper.cli._held_logs import logs_after_checks
from sweeper.cli._options import (
    json_option,
    num_prompts_option,
    output_len_option,
    ppl_data_option,
    ppl_records_option,
    prompts_option,
    ready_timeout_option,
    storage_option,
)
from sweeper.demo import demo_paths
from sweeper.errors import UserInputError
from sweeper.manifest import Manifest, parse_assignments
from sweeper.measure import EvalSettings, load_eval_data
from sweeper.serving import check_serve_env

logger = logging.getLogger(__name__)


@click.command("ablate")
@click.argument("manifest_path", metavar="MANIFEST", type=click.Path(dir_okay=False))
@click.option("--flags", metavar="A,B,...", help="Ablate these env keys as 0/1 flags (default: every 0/1 value).")
@click.option(
    "--alternative",
    "alternatives",
    metavar="KEY=VALUE",
    multiple=True,
    help="Compare VALUE with the manifest's own value of KEY (repeatable), e.g. DTYPE=float32.",
)
@click.option(
    "--add-one-in",
    is_flag=True,
    help="Start from a base with every switch off and turn each on (default: leave one out of the manifest).",
)
@click.option(
    "--follow-up",
    metavar="NAME",
    help="A second stage: re-measure the --keep switches of stored ablation NAME that read farthest "
    "from 1, judged on the new servers alone (not with --flags, --alternative, --add-one-in).",
)
@click.option("--keep", default=3, show_default=True, help="Switches a --follow-up re-measures.")
@click.option("--rounds", default=2, show_default=True, help="Rounds: a fresh server of every switch and base each.")
@click.option(
    "--block-size",
    default=DEFAULT_BLOCK_SIZE,
    show_default=True,
    help="Switches sharing one base server a round.",
)
@click.option(
    "--confidence",
    default=DEFAULT_CONFIDENCE,
    show_default=True,
    help="The whole ablation's level: each switch's interval is at 1 - (1 - this) / switches.",
)
@click.option(
    "--name",
    metavar="NAME",
    help="The ablation's name in the database (default: MANIFEST's name, or NAME-follow-up).",
)
@storage_option(name="url")
@prompts_option(help="Prompt set (file or hub id; default: the demo's tuning set).")
@ppl_data_option(help="PPL records (file or hub id; default: the demo's tuning set).")
@num_prompts_option(default=8, help="TPS prompts a server.")
@output_len_option(default=128, help="TPS output tokens a prompt.")
@ppl_records_option(help="PPL records a first-round server scores (default: all).")
@click.option("--fidelity-prompts", default=4, show_default=True, help="Prompts whose greedy tokens are compared.")
@click.option(
    "--allow-output-change",
    is_flag=True,
    help="Export a switch that helps but changes the outputs or PPL as on (default: off).",
)
@click.option(
    "--closing-pairs",
    default=DEFAULT_CLOSING_PAIRS,
    show_default=True,
    help="Pairs of fresh servers racing the exported manifest against the original at the end (0: none).",
)
@click.option(
    "-o",
    "--export",
    "export_path",
    type=click.Path(dir_okay=False),
    help="Write the manifest with every switch set as its verdict says.",
)
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False),
    default="ablation-runs",
    show_default=True,
    help="Where server logs go.",
)
@ready_timeout_option(help="Seconds to wait for each server.")
@json_option(help="Print one JSON object instead of the verdict lines.")
def command(
    manifest_path: str,
    flags: str | None,
    alternatives: tuple[str, ...],
    add_one_in: bool,
    follow_up: str | None,
    keep: int,
    rounds: int,
    confidence: float,
    block_size: int,
    name: str | None,
    url: str,
    prompts: str | None,
    ppl_data: str | None,
    num_prompts: int,
    output_len: int,
    ppl_records: int | None,
    fidelity_prompts: int,
    allow_output_change: bool,
    closing_pairs: int,
    export_path: str | None,
    run_dir: str,
    ready_timeout: float,
    as_json: bool,
) -> None:
    """Give every switch of MANIFEST a verdict: helps, helps but changes the outputs, no effect,
    hurts, or fails to start.

    A switch is an env value 0 or 1 (names that hold a count, such as
    MAX_NUM_SEQS, are left out: name them in --flags), or an alternative
    value given with --alternative. By default each switch is turned away
    from the manifest's value in turn (leave-one-out); --add-one-in starts
    from every switch off instead. Every server is fresh; in each round the
    switches of a block run beside one base server, every second round in
    reverse order. Each switch's TPS effect (its value over the other)
    gets an interval at 95 % for the whole ablation (Bonferroni over the
    switches), PPL is compared on the same records (paired), and greedy
    fidelity token for token against the base, whose own second server is
    the control. When the verdicts change the manifest (a switch that
    helps turned on, one that hurts turned off), a closing race measures
    the exported manifest against the original in --closing-pairs
    alternating pairs of fresh servers, as the organizers' re-run would,
    and compares their greedy tokens. Every server is stored as it ends:
    the same command goes on where an interrupted one stopped, and a
    larger --rounds adds rounds (or --closing-pairs pairs). `sweeper status
    --ablation NAME` and `sweeper report --ablation NAME` show it later.
    """
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("httpx").setLevel(logging.WARNING)
    manifest = Manifest.load(manifest_path)
    check_serve_env(manifest)  # every value checked before a server starts
    console = Console(stderr=True, soft_wrap=True)
    switches, mode = _switches(manifest, manifest_path, flags, alternatives, add_one_in, follow_up, keep, url, console)
    plan = AblationPlan(
        name=name or (f"{follow_up}-follow-up" if follow_up else f"{manifest.name}-ablation"),
        confidence=confidence,
        mode=mode,
        switches=switches,
        rounds=rounds,
        block_size=block_size,
        fidelity_prompts=fidelity_prompts,
        allow_output_change=allow_output_change,
        closing_pairs=closing_pairs,
    )
    eval_settings = _eval_settings(prompts, ppl_data, num_prompts, output_len, ppl_records, ready_timeout)
    with logs_after_checks():  # bad data is one line, before anything is stored or started
        load_eval_data(manifest, eval_settings)
    _announce(console, manifest, plan)
    result = run_ablation(
        manifest, plan, eval_settings, url=url, workdir=Path(run_dir), progress=lambda line: console.print(line)
    )
    exported = _export(manifest, result, plan.name, Path(export_path)) if export_path is not None else None
    _print_result(result, exported, as_json=as_json)


def _switches(
    manifest: Manifest,
    manifest_path: str,
    flags: str | None,
    alternatives: tuple[str, ...],
    add_one_in: bool,
    follow_up: str | None,
    keep: int,
    url: str,
    console: Console,
) -> tuple[tuple[Switch, ...], AblationMode]:
    """The switches to ablate and the mode: the manifest's (``--flags``, ``--alternative``,
    ``--add-one-in``), or a stored ablation's for a ``--follow-up``."""
    if follow_up is not None:
        if flags is not None or alternatives or add_one_in:
            raise UserInputError(
                "--follow-up takes the stored ablation's switches and mode: leave out --flags, --alternative "
                "and --add-one-in"
            )
        return _follow_up(follow_up, keep, manifest, url, console)
    flag_list = [f.strip() for f in flags.split(",")] if flags is not None else None
    switches = find_switches(
        manifest.env,
        flags=flag_list,
        alternatives=parse_assignments(list(alternatives), option="--alternative"),
        source=f"manifest {manifest_path}",
    )
    return switches, AblationMode.ADD_ONE_IN if add_one_in else AblationMode.LEAVE_ONE_OUT


def _announce(console: Console, manifest: Manifest, plan: AblationPlan) -> None:
    """What is about to run: the switches, the mode, the servers."""
    switches, rounds, closing_pairs = plan.switches, plan.rounds, plan.closing_pairs
    servers = rounds * servers_per_round(len(switches), plan.block_size)
    console.print(
        f"ablate {manifest.name}: {len(switches)} switch(es) ({', '.join(s.label for s in switches)}), "
        f"{plan.mode.value}, {rounds} round(s): {servers} fresh servers"
        + (f", then up to {2 * closing_pairs} for the closing race" if closing_pairs else "")
    )


def _print_result(result: AblationResult, exported: Path | None, *, as_json: bool) -> None:
    """The verdicts (or one JSON object) and where the exported manifest went."""
    if as_json:
        data = result.to_dict()
        data["export"] = str(exported) if exported else None
        click.echo(json.dumps(data, indent=2))
        return
    print_ablation(Console(soft_wrap=True), result)
    if exported is not None:
        click.echo(f"exported: {exported}")


def _eval_settings(
    prompts: str | None,
    ppl_data: str | None,
    num_prompts: int,
    output_len: int,
    ppl_records: int | None,
    ready_timeout: float,
) -> EvalSettings:
    """What every server of the ablation measures; the demo's tuning sets where no data is given
    (the ablation records only the data given)."""
    try:
        tps = TpsSettings(num_prompts=num_prompts, output_len=output_len, warmup_requests=1)
        ppl = PplSettings(max_records=ppl_records) if ppl_records is not None else PplSettings()
    except (ValueError, TypeError) as exc:
        raise UserInputError(str(exc)) from None
    demo = demo_paths()
    try:
        return EvalSettings(
            prompts=prompts,
            ppl_data=ppl_data,
            default_prompts=demo.prompts_tuning,
            default_ppl_data=demo.ppl_tuning,
            tps=tps,
            ppl=ppl,
            ready_timeout_s=ready_timeout,
        )
    except ValueError as exc:
        raise UserInputError(str(exc)) from None


def _export(manifest: Manifest, result: AblationResult, ablation: str, output: Path) -> Path:
    """``-o``: the manifest with every switch set as its verdict says, written to ``output``."""
    redacted = manifest.redacted()
    placed = place_manifest(
        redacted,
        result.export_env(redacted),
        output,
        name=f"{manifest.name}-ablated",
        description=f"{manifest.description} Switches set by sweeper ablate {ablation}.".strip(),
    )
    exported = placed.manifest.save(output)
    absolute = placed.absolute_paths_warning(str(output.parent))
    if absolute:
        click.echo(f"warning: {absolute}", err=True)
    return exported


def _follow_up(
    name: str, keep: int, manifest: Manifest, url: str, console: Console
) -> tuple[tuple[Switch, ...], AblationMode]:
    """The switches of stored ablation ``name`` that a second stage re-measures, and its mode."""
    record = stored_ablation(url, name)
    ablated = record.manifest.get("name")
    if ablated != manifest.name:
        raise UserInputError(f"--follow-up {name}: that ablation measured manifest {ablated!r}, not {manifest.name!r}")
    first = judge_stored(record).result
    switches = follow_up_switches(first, keep)
    readings = {r.switch.key: r for r in first.reports}
    console.print(
        f"follow-up of {name} ({record.status}): the {len(switches)} switch(es) that read farthest from 1, "
        "judged on the new servers alone:",
        highlight=False,
    )
    for switch in switches:
        console.print(f"  {switch.label}: {effect_text(readings[switch.key].tps_effect)} in {name}", highlight=False)
    return switches, AblationMode(record.mode)
