"""Study storage: Optuna's tables plus ours, on one SQLAlchemy URL.

A local SQLite file is the default (nothing to start; several workers of
one host may share it); PostgreSQL (``postgresql://...``, psycopg 3 from the
``postgres`` extra) lets workers on several hosts share a study.
``optuna-dashboard URL`` works on the same database.
"""

from __future__ import annotations

from storage._ablation import (
    ABLATION_FINISHED,
    ABLATION_INTERRUPTED,
    ABLATION_RUNNING,
    AblationRecord,
    AblationServer,
    AblationStore,
    ClosingServer,
    stored_ablation,
)
from storage._engine import DEFAULT_URL, StorageUrlError, check_url, normalize_url, optuna_storage, redact
from storage._queries import (
    STUDY_ATTR_PREFIX,
    TPS_IMPUTED_ATTR,
    StudyNotFoundError,
    StudyStatus,
    best_feasible,
    is_answer,
    pareto_front,
    study_names,
    study_status,
)
from storage._store import TrialOutcome, TrialRecord, TrialStore
from storage._verification import (
    BASE,
    CANDIDATE,
    Control,
    VerificationRecord,
    VerificationRun,
    VerificationStatus,
    VerificationStore,
    latest_by_trial,
    verifications,
)

__all__ = [
    "ABLATION_FINISHED",
    "ABLATION_INTERRUPTED",
    "ABLATION_RUNNING",
    "AblationRecord",
    "AblationServer",
    "AblationStore",
    "ClosingServer",
    "stored_ablation",
    "BASE",
    "CANDIDATE",
    "Control",
    "DEFAULT_URL",
    "TPS_IMPUTED_ATTR",
    "STUDY_ATTR_PREFIX",
    "StorageUrlError",
    "StudyNotFoundError",
    "StudyStatus",
    "TrialOutcome",
    "TrialRecord",
    "TrialStore",
    "VerificationRecord",
    "VerificationRun",
    "VerificationStatus",
    "VerificationStore",
    "best_feasible",
    "check_url",
    "is_answer",
    "latest_by_trial",
    "normalize_url",
    "optuna_storage",
    "pareto_front",
    "redact",
    "study_names",
    "study_status",
    "verifications",
]
