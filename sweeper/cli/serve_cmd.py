"""``sweeper serve MANIFEST``: run the patched vLLM server in the foreground."""

from __future__ import annotations

import logging
import os

import click

from sweeper.cli._options import set_option
from sweeper.manifest import Manifest, parse_assignments
from sweeper.serving import build_serve_command, exec_server

logger = logging.getLogger(__name__)


@click.command("serve")
@click.argument("manifest_path", metavar="MANIFEST", type=click.Path(dir_okay=False))
@set_option(help="Override one env value of the manifest (repeatable), e.g. --set SLIDING_WINDOW=24.")
@click.option(
    "--print-command",
    is_flag=True,
    help="Print the vLLM command that would run, and exit without starting it.",
)
def command(manifest_path: str, assignments: tuple[str, ...], print_command: bool) -> None:
    """Start vLLM's OpenAI-compatible server as the MANIFEST describes.

    Reads the challenge's env variables (MODEL_ID, SERVED_MODEL_NAME, PORT,
    HOST, MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION, MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS, SLIDING_WINDOW, HF_OVERRIDES, SPECULATIVE_CONFIG,
    CENTROID_TOP_K, OVERRIDE_GENERATION_CONFIG, DTYPE, ENFORCE_EAGER, ...;
    see docs/serve.md). Values in the environment win over the manifest's,
    as they do when the challenge harness or sweeper runs it; --set wins
    over both. The server binds 127.0.0.1 unless HOST says otherwise and
    serves greedy defaults unless OVERRIDE_GENERATION_CONFIG is given.

    A manifest with "serve": ["sweeper", "serve", "manifest.json"] runs
    unchanged under the challenge harness.
    """
    manifest = Manifest.load(manifest_path)
    overrides = parse_assignments(assignments)
    if overrides:
        manifest = manifest.render(overrides)
    environ = {k: v for k, v in os.environ.items() if k not in overrides}
    manifest.check_local_models({k: v for k, v in environ.items() if k in ("MODEL_ID", "SPECULATIVE_CONFIG")})
    serve = build_serve_command(manifest, environ)
    if print_command:
        click.echo(serve.shell())
        return
    if serve.not_interpreted:
        logger.info(
            "env keys passed through to the server's environment but not interpreted by sweeper serve: %s",
            ", ".join(serve.not_interpreted),
        )
    exec_server(serve, {**manifest.env, **environ, **overrides})
