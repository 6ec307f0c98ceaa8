"""``sweeper demo``: facts about the bundled tiny Gemma 4 demo."""

from __future__ import annotations

import json

import click

from sweeper.cli._options import json_option
from sweeper.demo import demo_paths
from sweeper.errors import SweeperError


@click.group("demo")
def command() -> None:
    """The bundled tiny Gemma 4 model, its MTP drafter, manifest and data sets."""


@command.command("info")
@json_option()
def info(as_json: bool) -> None:
    """Show the absolute paths of the bundled demo's parts."""
    paths = demo_paths()
    missing = paths.missing()
    if missing:
        raise SweeperError(
            f"the bundled demo is incomplete (missing: {', '.join(missing)}); "
            "rebuild it with scripts/build_tiny_model.py"
        )
    data = paths.as_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    width = max(map(len, data))
    for key, value in data.items():
        click.echo(f"{key:<{width}}  {value}")
