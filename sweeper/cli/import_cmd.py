"""``sweeper import MANIFEST``: what a study started from this manifest would search."""

from __future__ import annotations

import json
import logging

import click
from rich.console import Console
from rich.table import Table

from search_spaces import load_space
from sweeper.cli._options import json_option
from sweeper.errors import SearchSpaceError
from sweeper.manifest import Manifest
from sweeper.serving import check_serve_env
from sweeper.study import ImportPlan, default_space_for, describe_value, model_text, plan_from_manifest
from sweeper.sweep import demo_models

logger = logging.getLogger(__name__)


@click.command("import")
@click.argument("manifest_path", metavar="MANIFEST", type=click.Path(dir_okay=False))
@click.option(
    "--space",
    "space_spec",
    metavar="NAME|FILE",
    help="Search-space preset or file (default: the preset that fits the manifest's model).",
)
@json_option()
def command(manifest_path: str, space_spec: str | None, as_json: bool) -> None:
    """Show what 'sweeper run --manifest MANIFEST' would search, and from where.

    The manifest's env becomes the base of every trial; its own values of
    the searched parameters become the first trial. Nothing is started.
    """
    manifest = Manifest.load(manifest_path)
    check_serve_env(manifest)  # as 'run' checks it: a missing model folder is named as missing
    space_spec = space_spec or default_space_for(manifest, local_models=demo_models())
    if space_spec is None:
        raise SearchSpaceError(
            f"{manifest_path}: no preset fits {model_text(manifest)}: "
            "name a search space with --space (a preset name or a YAML/TOML file)"
        )
    plan = plan_from_manifest(manifest, load_space(space_spec))
    if as_json:
        click.echo(json.dumps(plan.to_dict(), indent=2, default=str))
        return
    _show(plan)


def _show(plan: ImportPlan) -> None:
    console = Console()
    manifest = plan.base_manifest
    click.echo(f"{manifest.name} ({manifest.source}) with space {plan.space.name}")
    table = Table(title="searched parameters (the manifest's values are the first trial)")
    for column in ("parameter", "manifest value", "read from", "range", "affects"):
        table.add_column(column)
    for item in plan.searched:
        value = describe_value(item.value) + ("" if item.in_range else " [yellow](outside the range)[/yellow]")
        table.add_row(item.name, value, item.source, item.describe_range(), item.affects)
    console.print(table)
    for name, reason in plan.skipped:
        click.echo(f"not searched: {name} ({reason})")
    click.echo(f"first trial: {plan.enqueue_name} {dict(plan.enqueued_params)}")
    click.echo("enqueued, in order: " + ", ".join(c.name for c in plan.space.enqueue))
    click.echo(f"kept as is in every trial: {len(plan.fixed)} env value(s): {', '.join(plan.fixed) or '-'}")
