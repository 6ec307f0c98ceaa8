"""An ablation's figures in words, the same in a terminal, a report and a log."""

from __future__ import annotations

from evaluators import Interval
from sweeper.ablation._closing import changes_text
from sweeper.ablation._run import AblationResult
from sweeper.ablation._verdict import SwitchReport


def effect_text(effect: Interval | None) -> str:
    """``+12.0% (+5.1% to +19.3%)`` for a ratio of 1.12 and its interval (``-``: none measured)."""
    if effect is None:
        return "-"
    return f"{effect.value - 1:+.1%} ({effect.low - 1:+.1%} to {effect.high - 1:+.1%})"


def ppl_text(report: SwitchReport) -> str:
    """The PPL ratio, subject over reference, with its interval and its check."""
    ratio = report.ppl_ratio
    if ratio is None:
        return report.ppl.value
    return f"{ratio.value:.4f} ({ratio.low:.4f}-{ratio.high:.4f}): {report.ppl.value}"


def outputs_text(report: SwitchReport) -> str:
    """Greedy fidelity against the base's tokens, with its check."""
    fidelity = report.fidelity
    if fidelity is None:
        return report.outputs.value
    return f"{fidelity.identical}/{fidelity.compared} identical: {report.outputs.value}"


def failures_text(report: SwitchReport) -> str:
    return ", ".join(report.failures) if report.failures else "-"


def closing_text(result: AblationResult) -> str:
    """What the closing race of the exported manifest against the original says, or why there is none."""
    if result.closing is not None:
        return result.closing.describe()
    if not result.changes:
        return "none needed, the verdicts keep the manifest as it is"
    return f"not measured yet for the exported manifest ({changes_text(result.changes)})"


def study_wide_level(result: AblationResult) -> float:
    """The whole ablation's level back from each switch's (Bonferroni: 1 - K * (1 - level))."""
    return 1.0 - len(result.reports) * (1.0 - result.effects.level)
