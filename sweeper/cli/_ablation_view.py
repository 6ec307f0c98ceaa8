"""How ``sweeper ablate`` and ``sweeper status --ablation`` show an ablation."""

from __future__ import annotations

from rich.console import Console

from sweeper.ablation import AblationResult, closing_text, effect_text, outputs_text, ppl_text, study_wide_level


def print_ablation(console: Console, result: AblationResult) -> None:
    """Each switch's verdict on a line of its own, its figures on the next, then what the
    intervals rest on and the closing race (lines, not a table: they read the same in a
    terminal, a log or a file)."""
    console.print(f"ablation {result.name}: {result.mode.value}, {result.rounds} round(s)")
    for report in result.reports:
        console.print(
            f"  {report.switch.label} vs {report.switch.reference_text}: [bold]{report.verdict.value}[/bold]",
            highlight=False,
        )
        pairs = f"{report.pairs} pair(s)" + (f", failed: {', '.join(report.failures)}" if report.failures else "")
        console.print(
            f"    TPS {effect_text(report.tps_effect)}, {pairs}; PPL {ppl_text(report)}; "
            f"outputs {outputs_text(report)}",
            highlight=False,
        )
    spread = result.effects.spread
    console.print(
        f"intervals at {result.effects.level:.2%} each ({study_wide_level(result):.0%} for the whole ablation); "
        f"between-server spread {spread.relative:.1%} on {spread.df:g} df; {result.servers} servers, "
        f"{result.failed_servers} failed, {result.gpu_seconds / 60:.1f} min",
        highlight=False,
    )
    console.print(f"closing race: {closing_text(result)}", highlight=False)
