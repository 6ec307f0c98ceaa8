"""The Pareto set of a study's configurations, each at its one TPS figure.

Re-measurements make several trials of one configuration; the set names
each configuration once, by the trial that found it, with its estimate
(``Standing.tps_interval``), so that a lucky re-measurement is not listed
as a configuration of its own.
"""

from __future__ import annotations

import dataclasses

from storage import StudyStatus, TrialRecord, pareto_front
from sweeper.study import Standing


def configuration_pareto(status: StudyStatus, now: Standing | None) -> tuple[TrialRecord, ...]:
    """The configurations no other beats on both TPS (up) and PPL (down), one trial each, its TPS
    the configuration's estimate (no standing: the trials' own Pareto set)."""
    if now is None:
        return status.pareto
    by_number = {r.number: r for r in status.trials}
    return tuple(
        pareto_front(dataclasses.replace(by_number[c.first], tps=now.tps_interval(c).value) for c in now.configurations)
    )
