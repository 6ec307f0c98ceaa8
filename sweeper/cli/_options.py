"""The options several commands share, declared once: the same name, metavar and words everywhere.

``storage_option`` (the study database, also from ``SWEEPER_STORAGE``) and ``study_option``
(which study in it); the words of the TPS measurement's sizes, which ``eval`` and
``rerun`` give with their defaults. A command says its own default of ``--study`` where
it differs (``sweeper run`` derives one); the rest is the same text in every ``--help``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from storage import DEFAULT_URL

STORAGE_ENV = "SWEEPER_STORAGE"
STORAGE_HELP = f"Study database: a SQLAlchemy URL or a SQLite file (env {STORAGE_ENV})."
STUDY_HELP = "Study name (needed when the database holds several)."
NUM_PROMPTS_HELP = "Prompts of each TPS measurement."
OUTPUT_LEN_HELP = "Output tokens of each TPS request."
WARMUP_REQUESTS_HELP = "Untimed chat requests before each TPS measurement."

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


def study_option(*, help: str = STUDY_HELP) -> Decorator:  # noqa: A002 - click's own word
    """``--study NAME``: which study of the database."""
    return click.option("--study", "study_name", metavar="NAME", default=None, help=help)
