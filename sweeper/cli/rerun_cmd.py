"""``sweeper rerun ANSWER --base BASE``: the organizers' re-run, interleaved, in fresh servers."""

from __future__ import annotations

import json
import logging

import click
from rich.console import Console

from evaluators import TpsSettings, WarmupSettings
from sweeper.answer import RerunSettings, rerun_against_base
from sweeper.cli._options import (
    json_option,
    num_prompts_option,
    output_len_option,
    prompts_option,
    ready_timeout_option,
    warmup_prompts_option,
    warmup_requests_option,
)
from sweeper.demo import demo_paths
from sweeper.manifest import Manifest
from sweeper.measure import warmup_settings_from
from sweeper.serving import check_serve_env

logger = logging.getLogger(__name__)


@click.command("rerun")
@click.argument("answer_path", metavar="ANSWER", type=click.Path(dir_okay=False))
@click.option(
    "--base",
    "base_path",
    required=True,
    metavar="BASE",
    type=click.Path(dir_okay=False),
    help="The base manifest the answer claims to beat.",
)
@click.option("--pairs", default=3, show_default=True, help="Answer/base pairs, each run in a fresh server.")
@prompts_option(help="Prompt set (file or hub id; default: the demo's tuning set).")
@num_prompts_option()
@output_len_option()
@warmup_requests_option()
@warmup_prompts_option(help="Warm-up bridge prompts (default: each manifest's own or 64).")
@ready_timeout_option(help="Seconds to wait for each server.")
@json_option(help="Print one JSON object instead of lines.")
def command(
    answer_path: str,
    base_path: str,
    pairs: int,
    prompts: str | None,
    num_prompts: int,
    output_len: int,
    warmup_requests: int,
    warmup_prompts: int | None,
    ready_timeout: float,
    as_json: bool,
) -> None:
    """Re-measure ANSWER (an exported manifest) against BASE, as the challenge's organizers do.

    Each pair runs both manifests' TPS, each in a fresh server, the order
    alternating from one pair to the next (A B, B A, ...). Prints each pair
    and answer / base with a paired t-interval made from the pairs alone,
    nothing from the study: the figure a study's claim must reproduce. The
    defaults are the challenge's sizes (128 prompts x 512 tokens); pass the
    study's own sizes to compare with its claim (the demo: --num-prompts 8
    --output-len 128 --warmup-requests 1).
    """
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("httpx").setLevel(logging.WARNING)
    answer, base = Manifest.load(answer_path), Manifest.load(base_path)
    for manifest in (answer, base):  # every value checked before a server starts
        check_serve_env(manifest)
    try:
        tps = TpsSettings(num_prompts=num_prompts, output_len=output_len, warmup_requests=warmup_requests)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    warmup = None
    if warmup_prompts is not None:
        own = warmup_settings_from(answer)
        warmup = WarmupSettings(enabled=True, num_prompts=warmup_prompts, max_tokens=own.max_tokens, seed=own.seed)
    prompts = prompts or str(demo_paths().prompts_tuning)  # the demo's tuning set where none is given
    settings = RerunSettings(pairs=pairs, tps=tps, prompts=prompts, ready_timeout_s=ready_timeout, warmup=warmup)
    console = Console(stderr=True)
    result = rerun_against_base(answer, base, settings, progress=lambda line: console.print(line))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    for pair in result.pairs:
        first, second = pair.order
        click.echo(
            f"pair {pair.index} ({first} first): answer {pair.answer_tps:.2f}, base {pair.base_tps:.2f} "
            f"tok/s, ratio {pair.ratio:.3f}"
        )
    click.echo(result.describe())
