"""How ``sweeper ablate`` and ``sweeper status --ablation`` show an ablation."""

from __future__ import annotations

from rich.console import Console

from sweeper.ablation import AblationResult, SwitchReport


def print_ablation(console: Console, result: AblationResult) -> None:
    """Each switch's verdict on a line of its own, its figures on the next, then what the
    intervals rest on (lines, not a table: they read the same in a terminal, a log or a file)."""
    console.print(f"ablation {result.name}: {result.mode.value}, {result.rounds} round(s)")
    for report in result.reports:
        console.print(
            f"  {report.switch.label} vs {report.switch.reference_text}: [bold]{report.verdict.value}[/bold]",
            highlight=False,
        )
        pairs = f"{report.pairs} pair(s)" + (f", failed: {', '.join(report.failures)}" if report.failures else "")
        console.print(
            f"    TPS {_effect_text(report)}, {pairs}; PPL {_ppl_text(report)}; outputs {_outputs_text(report)}",
            highlight=False,
        )
    spread = result.effects.spread
    console.print(
        f"intervals at {result.effects.level:.2%} each ({_study_wide(result):.0%} for the whole ablation); "
        f"between-server spread {spread.relative:.1%} on {spread.df:g} df; {result.servers} servers, "
        f"{result.failed_servers} failed, {result.gpu_seconds / 60:.1f} min",
        highlight=False,
    )
    console.print(f"closing race: {closing_text(result)}", highlight=False)


def closing_text(result: AblationResult) -> str:
    """What the closing race of the exported manifest against the original says, or why there is none."""
    if not result.changes:
        return "none needed, the verdicts keep the manifest as it is"
    if result.closing is None:
        changed = ", ".join(f"{key}={value}" for key, value in result.changes.items())
        return f"not measured yet for the exported manifest ({changed})"
    return result.closing.describe()


def _effect_text(report: SwitchReport) -> str:
    effect = report.tps_effect
    if effect is None:
        return "-"
    return f"{effect.value - 1:+.1%} ({effect.low - 1:+.1%} to {effect.high - 1:+.1%})"


def _ppl_text(report: SwitchReport) -> str:
    ratio = report.ppl_ratio
    if ratio is None:
        return report.ppl.value
    return f"{ratio.value:.4f} ({ratio.low:.4f}-{ratio.high:.4f}): {report.ppl.value}"


def _outputs_text(report: SwitchReport) -> str:
    fidelity = report.fidelity
    if fidelity is None:
        return report.outputs.value
    return f"{fidelity.identical}/{fidelity.compared} identical: {report.outputs.value}"


def _study_wide(result: AblationResult) -> float:
    """The whole ablation's level back from each switch's (Bonferroni: 1 - K * (1 - level))."""
    return 1.0 - len(result.reports) * (1.0 - result.effects.level)
