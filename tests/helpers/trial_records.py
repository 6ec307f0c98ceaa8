"""A stored trial for tests that build study histories by hand (``storage.TrialRecord``).

tests/helpers is on pytest's ``pythonpath`` (pyproject.toml): ``from trial_records import trial_record``.
"""

from __future__ import annotations

import datetime
from typing import Any

from storage import TrialRecord

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)


def trial_record(number: int, **fields: Any) -> TrialRecord:
    """A complete, feasible trial of study "s" (PPL 1.1 under a cap of 1.2), ``fields`` set over that."""
    defaults: dict[str, Any] = dict(
        study_name="s",
        number=number,
        optuna_trial_id=number + 1,
        state="complete",
        role="sampled",
        params={},
        overrides={},
        manifest=None,
        tps=1.0,
        ppl=1.1,
        ppl_cap=1.2,
        feasible=True,
        ppl_reused_from=None,
        early_stopped=False,
        tps_imputed=False,
        extras={},
        versions={},
        error_kind=None,
        error_message=None,
        log_tail=None,
        server_token=None,
        host="h",
        pid=1,
        started_at=NOW,
        heartbeat_at=NOW,
        finished_at=NOW,
    )
    return TrialRecord(**{**defaults, **fields})
