"""The ``sweeper`` group: the one table of commands, loaded lazily, and the console script's exit path.

``COMMAND_MODULES`` names each command's module; ``app`` imports a module only
when its command is used or listed; ``main`` turns an error raised on purpose
(the roots in ``sweeper.errors.ERROR_ROOTS``) or a usage error into one line on
stderr and its exit code.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from sweeper import __version__, invocation
from sweeper.errors import ERROR_ROOTS

# module name -> the click command it defines (the one table of commands)
COMMAND_MODULES = {
    "serve": "sweeper.cli.serve_cmd",
    "demo": "sweeper.cli.demo_cmd",
    "eval": "sweeper.cli.eval_cmd",
    "env": "sweeper.cli.env_cmd",
    "run": "sweeper.cli.run_cmd",
    "status": "sweeper.cli.status_cmd",
    "verify": "sweeper.cli.verify_cmd",
    "report": "sweeper.cli.report_cmd",
    "export": "sweeper.cli.export_cmd",
    "rerun": "sweeper.cli.rerun_cmd",
    "import": "sweeper.cli.import_cmd",
    "ablate": "sweeper.cli.ablate_cmd",
}


class _LazyGroup(click.Group):
    """Imports a command's module only when that command is used or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMAND_MODULES.get(cmd_name)
        if module_name is None:
            return None
        return importlib.import_module(module_name).command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sweeper")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def app(ctx: click.Context, debug: bool) -> None:
    """Quality-gated parameter sweeps for LLM serving.

    Every trial starts a real (patched) vLLM server with candidate settings,
    measures tokens/s and perplexity exactly as the Fast Gemma Challenge does,
    and rejects configurations over the perplexity cap.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    if not debug:  # one line per request is noise at INFO
        for chatty in ("httpx", "httpcore", "optuna"):
            logging.getLogger(chatty).setLevel(logging.WARNING)


def main() -> None:
    """Console-script entry point: one exit path for user-facing errors."""
    debug = "--debug" in sys.argv[1:] or os.environ.get("SWEEPER_DEBUG") == "1"
    invocation.set_program(invocation.program_from(sys.argv[0]))  # every hint as the user can type it
    try:
        app.main(standalone_mode=False)
    except ERROR_ROOTS as exc:
        if debug:
            raise
        click.echo(f"error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # a bad option or argument: one line, as every user error
        command = exc.ctx.command_path if exc.ctx is not None else "sweeper"
        click.echo(f"error: {one_line(exc.format_message())} (see '{command} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


def one_line(text: str) -> str:
    """An error message as the one line the CLI prints (line breaks and runs of spaces folded)."""
    return " ".join(text.split())
