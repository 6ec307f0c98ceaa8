"""Stored trials built by hand, for tests and benchmarks that make study histories without a study.

Like ``optuna.testing``: not used by sweeper itself. ``trial_record(number, **fields)`` is a complete,
feasible trial of study "s" (PPL 1.1 under a cap of 1.2); any field can be set over that.
"""

from __future__ import annotations

import datetime
from typing import Any

from storage._store import TrialRecord

# when every hand-built trial started, beat and finished
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
