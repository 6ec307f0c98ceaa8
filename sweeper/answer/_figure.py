"""The answer's TPS: one figure wherever the answer is shown.

A configuration is picked for a race because its first server read high, so
that reading overstates it. The figure stated for a configuration is the
estimate after selection: the geometric mean of the servers measured after
it was picked (its confirmation trials), else of all its servers
(``Standing.tps_interval``). ``sweeper run``, ``status``, ``verify``,
``export`` and the report state this figure and no other for the answer.
"""

from __future__ import annotations

from evaluators.intervals import Interval
from sweeper.answer._candidates import Answer
from sweeper.study import Configuration, Standing


def configuration_tps(now: Standing | None, config: Configuration | None) -> Interval | None:
    """``config``'s TPS after selection with its interval (None: no standing or no configuration)."""
    if now is None or config is None:
        return None
    return now.tps_interval(config)


def answer_tps(now: Standing | None) -> Interval | None:
    """The study's answer's (its incumbent's) TPS after selection (None: no answer yet)."""
    return configuration_tps(now, now.incumbent if now is not None else None)


def answer_figure(answer: Answer) -> float | None:
    """An ``Answer``'s TPS as every command states it: its configuration's estimate after
    selection; its trial's own figure where there is no standing (None: no answer)."""
    interval = configuration_tps(answer.standing, answer.configuration)
    if interval is not None:
        return interval.value
    return answer.record.tps if answer.record is not None else None


def tps_text(value: float) -> str:
    """``198.8 tok/s``: a TPS figure as every output of sweeper prints it (one decimal, its unit)."""
    return f"{value:.1f} tok/s"


def tps_figure_text(interval: Interval) -> str:
    """The figure of ``interval`` as every command prints it for the answer."""
    return tps_text(interval.value)
