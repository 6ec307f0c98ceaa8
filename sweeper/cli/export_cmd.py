"""``sweeper export``: the study's answer as a manifest that runs as is."""

from __future__ import annotations

import json
import logging
import os

import click

from sweeper.answer import export_answer
from sweeper.cli._options import base_manifest_option, json_option, storage_option, study_option
from sweeper.manifest import Manifest

logger = logging.getLogger(__name__)


@click.command("export")
@study_option()
@storage_option()
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False),
    help="Manifest file to write (default: ./<derived name>.json).",
)
@base_manifest_option()
@click.option(
    "--allow-unverified",
    is_flag=True,
    help="Export the best feasible trial even if it is not verified on held-out data.",
)
@json_option()
def command(
    study_name: str | None,
    storage: str,
    output: str | None,
    manifest_path: str | None,
    allow_unverified: bool,
    as_json: bool,
) -> None:
    """Write the study's winner as a manifest in the challenge's format.

    The winner is the fastest trial VERIFIED on held-out data ('sweeper
    verify'); an unverified one is refused unless --allow-unverified. The
    manifest keeps the base manifest's fields, carries the winner's env,
    a name derived from its values and a description with its TPS (the
    estimate after selection, the figure 'sweeper run' and 'status' state),
    PPL and verification status. Secret env values (tokens, keys) are left
    out. Paths are relative to the written file's folder where the files lie
    in it or below, else absolute (named in a warning). A dependency naming
    this project is pinned to this version (sweeper-serving[cpu]==VERSION);
    the base manifest's other dependencies and serve command are kept. Ends
    with how the manifest runs: its own serve command. Nothing is written
    when the export is refused.
    """
    manifest = Manifest.load(manifest_path) if manifest_path else None
    result = export_answer(
        storage=storage,
        study_name=study_name,
        output=output,
        base_manifest=manifest,
        allow_unverified=allow_unverified,
    )
    if result.left_out_secrets:
        click.echo(
            f"note: secret env values left out: {', '.join(result.left_out_secrets)} "
            "(set them in the environment that serves the manifest)",
            err=True,
        )
    if not result.answer.verified:
        click.echo(f"warning: exported an answer that is {result.answer.status.upper()}", err=True)
    shown = output if output is not None else result.path.name  # the path as the user spelled it
    if result.pinned_dependencies:
        pins = ", ".join(f"{old} -> {new}" for old, new in result.pinned_dependencies.items())
        click.echo(f"note: dependencies pinned to this sweeper: {pins}", err=True)
    absolute = result.absolute_paths_warning(os.path.dirname(shown) or ".")
    if absolute:
        click.echo(f"warning: {absolute}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    click.echo(f"wrote {shown} ({result.manifest.name})")
    click.echo(f"  {result.answer.describe()}")
    click.echo(f"  {result.serve_hint(shown)}")
