"""A study as every output states it: its servers by kind, and its status as data.

``ServerCount`` splits the servers a study ran into the trials searched, the race
servers (confirmation trials) and the verification servers (``sweeper verify``'s
repeats, the candidate's and the base's); ``sweeper run``'s closing block,
``status`` and the report count them alike. ``study_data`` is what ``status --json``
and ``run --json`` print: the stored status with its public settings
(``sweeper.study.public_settings``), the counts split, and ``best`` and ``pareto``
at each configuration's one figure (``Standing.tps_interval``), never the reading
that selected it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from storage import StudyStatus, TrialRecord, VerificationRecord
from sweeper.answer._candidates import Answer
from sweeper.study import Configuration, Standing, is_confirmation, public_settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerCount:
    """The servers a study ran: its searched trials, its race servers and its verification servers."""

    searched: int
    races: int
    verifications: int = 0

    @property
    def servers(self) -> int:
        return self.searched + self.races + self.verifications

    @classmethod
    def of(cls, records: Sequence[TrialRecord], verifications: Iterable[VerificationRecord] = ()) -> ServerCount:
        """``records``' started trials (queued ones are not servers yet) and ``verifications``' repeats."""
        started = [r for r in records if r.state not in ("waiting", "queued")]
        races = sum(1 for r in started if is_confirmation(r.role))
        checked = sum(len(v.runs) + len(v.base_runs) for v in verifications)
        return cls(searched=len(started) - races, races=races, verifications=checked)

    def parts(self, *, every: bool = False) -> list[str]:
        """``["4 trials searched", "9 race servers", "6 verification servers"]``; the verification
        servers only where any ran, unless ``every``."""
        parts = [_count(self.searched, "trial", " searched"), _count(self.races, "race server")]
        if self.verifications or every:
            parts.append(_count(self.verifications, "verification server"))
        return parts

    def text(self) -> str:
        """``13 servers (4 trials searched, 9 race servers)``; the verification servers where any ran."""
        return f"{_count(self.servers, 'server')} ({', '.join(self.parts())})"

    def to_dict(self) -> dict[str, int]:
        return {
            "servers": self.servers,
            "searched": self.searched,
            "race_servers": self.races,
            "verification_servers": self.verifications,
        }


def _count(n: int, word: str, after: str = "") -> str:
    return f"{n} {word}{'s' if n != 1 else ''}{after}"


def configuration_data(now: Standing, config: Configuration, record: TrialRecord | None) -> dict[str, Any]:
    """One configuration as ``best`` and ``pareto`` hold it: ``tps`` is its one figure."""
    interval = now.tps_interval(config)
    return {
        "number": config.first,
        "params": dict(config.params),
        "tps": interval.value,
        "tps_interval": interval.to_dict(),
        "ppl": config.ppl,
        "ppl_cap": config.ppl_cap,
        "role": record.role if record is not None else None,
        "trials": list(config.numbers),
        "counted": list(now.counted(config)),
        "readings": [{"trial": n, "tps": v} for n, v in config.readings],
    }


def study_data(status: StudyStatus, answer: Answer) -> dict[str, Any]:
    """The study as data (``status --json``, ``run --json``); see the module docstring."""
    data = status.to_dict()
    data["settings"] = public_settings(status.settings)
    data["counts"] = {**status.counts, **ServerCount.of(status.trials, status.verifications.values()).to_dict()}
    now = answer.standing
    data["standing"] = now.to_dict() if now is not None else None
    if now is None or not now.configurations:
        return data  # no gate-passing configuration: the stored figures are all there is
    by_number = {r.number: r for r in status.trials}
    chosen = answer.configuration
    data["best"] = None if chosen is None else configuration_data(now, chosen, by_number.get(chosen.first))
    front = sorted(now.front(), key=lambda pair: (-pair[1].value, pair[0].ppl, pair[0].first))
    data["pareto"] = [configuration_data(now, config, by_number.get(config.first)) for config, _ in front]
    return data
