"""``sweeper env MANIFEST``: the manifest's server venv, created once from its dependencies."""

from __future__ import annotations

import json

import click

from sweeper.cli._options import json_option
from sweeper.manifest import Manifest
from sweeper.serving import CACHE_VARIABLE, server_venv


@click.command("env")
@click.argument("manifest_path", metavar="MANIFEST", type=click.Path(dir_okay=False))
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    help=f"Where server venvs are cached (default: ${CACHE_VARIABLE}, else ~/.cache/sweeper/venvs).",
)
@json_option()
def command(manifest_path: str, cache_dir: str | None, as_json: bool) -> None:
    """Create (or reuse) a venv with MANIFEST's dependencies and print its python.

    As the challenge harness does, the manifest's `dependencies` are
    installed with pip (from the manifest's folder) into a venv of their
    own, cached under a hash of the list: the same list is installed once.
    A failed install caches nothing. Serve with it through
    `sweeper run --server-venv` or `--server-python PATH`.
    """
    manifest = Manifest.load(manifest_path)
    venv = server_venv(manifest.dependencies, cwd=manifest.folder, cache_root=cache_dir)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "python": str(venv.python),
                    "path": str(venv.path),
                    "key": venv.key,
                    "dependencies": list(venv.dependencies),
                    "created": venv.created,
                }
            )
        )
        return
    click.echo(str(venv.python))
