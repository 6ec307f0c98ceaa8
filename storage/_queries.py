"""Questions asked of a stored study: trials by state, the best feasible one, the Pareto set."""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.engine import make_url

from errortree import StorageError, StudyError
from storage._engine import normalize_url, optuna_storage, redact
from storage._store import TrialRecord, TrialStore
from storage._verification import VerificationRecord, latest_by_trial, verifications

logger = logging.getLogger(__name__)

# study-level settings, kept in Optuna's study user attributes (so the dashboard shows them)
STUDY_ATTR_PREFIX = "sweeper:"
# the Optuna user attribute of a trial whose TPS stands in for one never measured
# (stopped early over the PPL cap); samplers must not learn speed from it
TPS_IMPUTED_ATTR = "tps_imputed"
OPTUNA_STATES = ("COMPLETE", "FAIL", "RUNNING", "WAITING", "PRUNED")


def is_answer(record: TrialRecord) -> bool:
    """A measured, gate-passing trial: the only kind that can be the answer."""
    return (
        record.state == "complete"
        and bool(record.feasible)
        and record.tps is not None
        and record.ppl is not None
        and not record.tps_imputed
    )


def best_feasible(records: Iterable[TrialRecord]) -> TrialRecord | None:
    """The fastest trial that passed the gate (ties: the earlier trial)."""
    answers = [r for r in records if is_answer(r)]
    return max(answers, key=lambda r: (r.tps, -r.number)) if answers else None


def pareto_front(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Feasible trials no other feasible trial beats on both TPS (up) and PPL (down)."""
    answers = [r for r in records if is_answer(r)]
    front = []
    for r in answers:
        dominated = any(o.tps >= r.tps and o.ppl <= r.ppl and (o.tps > r.tps or o.ppl < r.ppl) for o in answers)
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: (-r.tps, r.ppl, r.number))


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyStatus:
    study_name: str
    url: str
    settings: Mapping[str, Any]
    counts: Mapping[str, int]
    best: TrialRecord | None
    pareto: tuple[TrialRecord, ...]
    trials: tuple[TrialRecord, ...]
    # the latest verification of each verified trial (sweeper verify), by trial number
    verifications: Mapping[int, VerificationRecord] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def brief(record: TrialRecord) -> dict[str, Any]:
            keys = ("number", "params", "tps", "ppl", "ppl_cap", "role")
            return {key: getattr(record, key) for key in keys}

        return {
            "study": self.study_name,
            "storage": self.url,
            "settings": dict(self.settings),
            "counts": dict(self.counts),
            "best": brief(self.best) if self.best else None,
            "pareto": [brief(r) for r in self.pareto],
            "verifications": {str(n): v.to_dict() for n, v in self.verifications.items()},
        }


class StudyNotFoundError(StudyError):
    """No study database at the given storage, or no such study in it: input the user fixes (exit code 2)."""

    exit_code = 2


def _existing_database(url: str | None) -> str:
    """The normalized URL; a SQLite file that does not exist is an error, not a new database."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        if not Path(parsed.database).is_file():
            raise StudyNotFoundError(f"no study database at {parsed.database} (see --storage)")
    return url


def study_names(url: str | None) -> list[str]:
    storage = optuna_storage(_existing_database(url))
    try:
        return sorted(s.study_name for s in storage.get_all_studies())
    finally:
        storage.remove_session()


def study_status(url: str | None, study_name: str | None = None) -> StudyStatus:
    """Everything ``sweeper status`` shows, read from the study database."""
    url = _existing_database(url)
    storage = optuna_storage(url)
    try:
        names = sorted(s.study_name for s in storage.get_all_studies())
        if study_name is None:
            if len(names) != 1:
                listing = f"{len(names)} studies ({', '.join(names)})" if names else "no study"
                raise StudyNotFoundError(f"{redact(url)} holds {listing}: name one with --study")
            study_name = names[0]
        if study_name not in names:
            raise StudyNotFoundError(
                f"no study named {study_name!r} in {redact(url)} (studies: {', '.join(names) or 'none'})"
            )
        try:
            study = optuna.load_study(study_name=study_name, storage=storage)
            frozen = study.get_trials(deepcopy=False)
            settings = {
                key[len(STUDY_ATTR_PREFIX) :]: value
                for key, value in study.user_attrs.items()
                if key.startswith(STUDY_ATTR_PREFIX)
            }
        except Exception as exc:  # noqa: BLE001 - any Optuna/SQLAlchemy failure is a storage one
            raise StorageError(f"cannot read study {study_name!r} from {redact(url)}: {exc}") from exc
    finally:
        storage.remove_session()
    store = TrialStore(url)
    try:
        records = store.records(study_name, phases=True)
    finally:
        store.close()
    counts: dict[str, int] = collections.Counter(t.state.name for t in frozen)
    counts = {state: counts.get(state, 0) for state in OPTUNA_STATES}
    counts["feasible"] = sum(1 for r in records if is_answer(r))
    counts["infeasible"] = sum(1 for r in records if r.state == "complete" and not r.feasible)
    return StudyStatus(
        study_name=study_name,
        url=redact(url),
        settings=settings,
        counts=counts,
        best=best_feasible(records),
        pareto=tuple(pareto_front(records)),
        trials=tuple(records),
        verifications=latest_by_trial(verifications(url, study_name)),
    )
