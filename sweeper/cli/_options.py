"""The options several commands share, declared once: the same flag, name, metavar and type everywhere.

``storage_option`` (the study database, also from ``SWEEPER_STORAGE``) and ``study_option``
(which study in it) read the same in every ``--help``; so do the TPS measurement's sizes
(``--num-prompts``, ``--output-len``, ``--warmup-requests``) where ``eval`` and ``rerun``
give the challenge's defaults, ``--json`` and the base manifest of a stored study. Where a
command's words or default differ (``sweeper run`` derives its sizes and its study's name,
``ablate`` measures smaller servers, ``verify`` reads held-out data), it passes its own
``help`` or ``default``; the flag, metavar and type stay those declared here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from evaluators import TpsSettings
from storage import DEFAULT_URL

STORAGE_ENV = "SWEEPER_STORAGE"
STORAGE_HELP = f"Study database: a SQLAlchemy URL or a SQLite file (env {STORAGE_ENV})."
STUDY_HELP = "Study name (needed when the database holds several)."
NUM_PROMPTS_HELP = "Prompts of each TPS measurement."
OUTPUT_LEN_HELP = "Output tokens of each TPS request."
WARMUP_REQUESTS_HELP = "Untimed chat requests before each TPS measurement."
JSON_HELP = "Print one JSON object."
SET_HELP = "Override one env value of the manifest (repeatable)."
BASE_MANIFEST_HELP = "Base manifest the study ran on (default: the one the study recorded)."
READY_TIMEOUT_S = 900.0  # seconds a server may take to answer, unless a command is told otherwise

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def storage_option(*, default: str = DEFAULT_URL, name: str = "storage") -> Decorator:
    """``--storage URL``: the study database (``name``: the parameter's name in the command)."""
    return click.option(
        "--storage",
        name,
        default=default,
        show_default=True,
        envvar=STORAGE_ENV,
        metavar="URL",
        help=STORAGE_HELP,
    )


def study_option(*, help: str = STUDY_HELP) -> Decorator:
    """``--study NAME``: which study of the database."""
    return click.option("--study", "study_name", metavar="NAME", default=None, help=help)


def json_option(*, help: str = JSON_HELP) -> Decorator:
    """``--json``: one JSON object on stdout instead of the text."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def base_manifest_option(*, help: str = BASE_MANIFEST_HELP) -> Decorator:
    """``--manifest FILE``: the base manifest a stored study ran on (default: the one it recorded)."""
    return click.option("--manifest", "manifest_path", metavar="FILE", type=click.Path(dir_okay=False), help=help)


def prompts_option(*, help: str) -> Decorator:
    """``--prompts P``: a prompt set, a file or hub id."""
    return click.option("--prompts", metavar="P", help=help)


def ppl_data_option(*, help: str) -> Decorator:
    """``--ppl-data D``: PPL records, a file or hub id."""
    return click.option("--ppl-data", metavar="D", help=help)


def num_prompts_option(*, default: int | None = TpsSettings.num_prompts, help: str = NUM_PROMPTS_HELP) -> Decorator:
    """``--num-prompts N``: prompts of each TPS measurement (no default: the command derives one)."""
    return click.option("--num-prompts", type=int, help=help, **_shown_default(default))


def output_len_option(*, default: int | None = TpsSettings.output_len, help: str = OUTPUT_LEN_HELP) -> Decorator:
    """``--output-len N``: output tokens of each TPS request."""
    return click.option("--output-len", type=int, help=help, **_shown_default(default))


def warmup_requests_option(
    *,
    default: int | None = TpsSettings.warmup_requests,
    help: str = WARMUP_REQUESTS_HELP,
) -> Decorator:
    """``--warmup-requests N``: untimed chat requests before each TPS measurement."""
    return click.option("--warmup-requests", type=int, help=help, **_shown_default(default))


def warmup_prompts_option(*, help: str) -> Decorator:
    """``--warmup-prompts N``: the warm-up bridge's prompts."""
    return click.option("--warmup-prompts", type=int, help=help)


def ppl_records_option(*, help: str, name: str = "ppl_records") -> Decorator:
    """``--ppl-records N``: score only the first N PPL records."""
    return click.option("--ppl-records", name, type=int, help=help)


def ready_timeout_option(*, help: str, name: str = "ready_timeout") -> Decorator:
    """``--ready-timeout SECONDS``: how long a server may take to be ready."""
    return click.option("--ready-timeout", name, type=float, default=READY_TIMEOUT_S, show_default=True, help=help)


def set_option(*, help: str = SET_HELP) -> Decorator:
    """``--set KEY=VALUE`` (repeatable): one env value of the manifest overridden."""
    return click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help=help)


def _shown_default(default: int | None) -> dict[str, Any]:
    """A default shown in ``--help``; none given to click where the command derives its own."""
    return {} if default is None else {"default": default, "show_default": True}
