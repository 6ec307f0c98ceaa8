"""Our tables beside Optuna's, on every storage kind, and the questions asked of them."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import optuna
import pytest

import sweeper
from search_spaces import space_from_dict
from storage import (
    TrialOutcome,
    TrialRecord,
    TrialStore,
    best_feasible,
    normalize_url,
    pareto_front,
    redact,
    study_status,
)
from storage.errors import StorageError, StudyNotFoundError
from storage.testing import trial_record
from sweeper.study import Measurement, PplGate, StudyOptions

SPACE = space_from_dict(
    {
        "name": "toy",
        "parameters": [
            {
                "name": "w",
                "type": "int",
                "low": 1,
                "high": 8,
                "affects": "quality",
                "faster": "lower",
                "env": "W",
            },
            {"name": "k", "type": "int", "low": 1, "high": 4, "affects": "speed", "env": "K"},
        ],
    }
)

# (w, k) -> (tps, ppl); the cap is 2.0
TABLE = {
    (1, 1): (120.0, 2.6),  # the fastest, over the cap: never an answer
    (2, 2): (100.0, 1.9),
    (3, 2): (90.0, 1.8),
    (3, 3): (95.0, 1.8),
    (5, 1): (60.0, 1.5),
    (6, 4): (60.0, 1.6),  # dominated by (5, 1)
    (8, 1): (50.0, 1.4),
}


def table_evaluate(params, context):
    tps, ppl = TABLE[(params["w"], params["k"])]
    return Measurement(tps=tps, ppl=ppl)


def run_table_study(url: str, name: str = "table", mode: str = "tps"):
    configs = [{"w": w, "k": k} for (w, k) in TABLE]
    return sweeper.run_study(
        SPACE,
        table_evaluate,
        StudyOptions(
            study_name=name,
            storage=url,
            n_trials=len(configs),
            gate=PplGate(cap=2.0),
            mode=mode,
            sampler="random",
            seed=0,
            enqueue=configs,
            handle_signals=False,
        ),
    )


def test_trial_round_trip(storage_url: str) -> None:
    store = TrialStore(storage_url)
    store.start_trial(
        study_name="s",
        number=0,
        optuna_trial_id=1,
        params={"w": 2},
        overrides={"W": "2"},
        role="baseline",
        host="h",
        pid=42,
        ppl_cap=2.5,
    )
    store.update_running("s", 0, server_token="tok-1", manifest={"name": "m", "env": {"W": "2"}})
    store.add_phase("s", 0, "start", 1.5)
    running = store.records("s", states=["running"])
    assert [r.server_token for r in running] == ["tok-1"]
    store.finish_trial(
        "s",
        0,
        TrialOutcome(
            state="complete",
            tps=10.0,
            ppl=math.inf,
            ppl_cap=2.5,
            feasible=False,
            extras={"acceptance": [0.7, 0.5], "bad": math.nan},
            versions={"vllm": "0.32"},
            phases=[("ppl", 2.0), ("tps", 3.0)],
            requests=[{"kind": "tps", "output_tokens": 512}, {"kind": "ppl", "nll": 1.2}],
            log_tail="last line",
        ),
    )
    record = store.record("s", 0)
    assert record.state == "complete" and record.role == "baseline"
    assert (record.tps, record.ppl, record.ppl_cap, record.feasible) == (10.0, math.inf, 2.5, False)
    assert record.params == {"w": 2} and record.overrides == {"W": "2"}
    assert record.manifest == {"name": "m", "env": {"W": "2"}}
    assert record.phases == (("start", 1.5), ("ppl", 2.0), ("tps", 3.0))
    assert record.requests == ({"kind": "tps", "output_tokens": 512}, {"kind": "ppl", "nll": 1.2})
    assert record.extras == {"acceptance": [0.7, 0.5], "bad": "nan"}
    assert record.versions == {"vllm": "0.32"}
    assert record.log_tail == "last line" and record.server_token == "tok-1"
    assert (record.host, record.pid) == ("h", 42)
    assert record.finished_at is not None and record.finished_at >= record.started_at
    assert json.loads(json.dumps(record.to_dict(), default=str))["number"] == 0
    with pytest.raises(StorageError, match="no recorded trial 7"):
        store.record("s", 7)
    store.close()


def rec(
    number: int,
    tps: float | None,
    ppl: float | None,
    *,
    feasible=True,
    state="complete",
    imputed=False,
) -> TrialRecord:
    return trial_record(
        number,
        optuna_trial_id=number,
        state=state,
        tps=tps,
        ppl=ppl,
        ppl_cap=2.0,
        feasible=feasible,
        early_stopped=imputed,
        tps_imputed=imputed,
    )


def test_pareto_front_and_best_use_only_answers() -> None:
    records = [
        rec(0, 120.0, 2.6, feasible=False),  # fastest, but over the cap
        rec(1, 100.0, 1.9),
        rec(2, 90.0, 1.8),
        rec(3, 95.0, 1.8),  # dominates 2
        rec(4, 60.0, 1.5),
        rec(5, 60.0, 1.6),  # dominated by 4
        rec(6, 50.0, 1.4),
        rec(7, 500.0, 1.0, imputed=True),  # an early-stopped trial's stand-in TPS
        rec(8, None, None, state="failed", feasible=None),
    ]
    assert [r.number for r in pareto_front(records)] == [1, 3, 4, 6]
    assert best_feasible(records).number == 1
    assert best_feasible([records[0], records[8]]) is None


def test_pareto_front_keeps_equal_points_and_orders_ties_by_ppl_then_number() -> None:
    records = [
        rec(0, 80.0, 1.7),
        rec(1, 100.0, 1.9),
        rec(2, 100.0, 1.9),  # the same point as 1: neither beats the other
        rec(3, 100.0, 2.0),  # as fast as 1, worse PPL: dominated
        rec(4, 80.0, 1.7),  # the same point as 0
    ]
    assert [r.number for r in pareto_front(records)] == [1, 2, 0, 4]
    assert best_feasible(records).number == 1


def test_status_of_a_known_study(storage_url: str) -> None:
    result = run_table_study(storage_url)
    assert result.trials_run == len(TABLE) and result.stop_reason == "n_trials"
    status = study_status(storage_url, "table")
    assert status.counts["COMPLETE"] == 7 and status.counts["FAIL"] == 0
    assert status.counts["feasible"] == 6 and status.counts["infeasible"] == 1
    assert status.best.params == {"w": 2, "k": 2} and status.best.tps == 100.0
    assert [dict(r.params) for r in status.pareto] == [
        {"w": 2, "k": 2},
        {"w": 3, "k": 3},
        {"w": 5, "k": 1},
        {"w": 8, "k": 1},
    ]
    assert status.settings["mode"] == "tps" and status.settings["ppl_cap"] == 2.0
    as_json = status.to_dict()
    assert as_json["best"]["tps"] == 100.0 and len(as_json["pareto"]) == 4
    # Optuna agrees: the over-the-cap trial is never its best
    study = optuna.load_study(study_name="table", storage=storage_url)
    assert study.best_trial.params == {"w": 2, "k": 2}


def test_pareto_mode_front_matches_optuna(storage_url: str) -> None:
    run_table_study(storage_url, name="two", mode="pareto")
    status = study_status(storage_url, "two")
    study = optuna.load_study(study_name="two", storage=storage_url)
    optuna_front = sorted(t.number for t in study.best_trials)
    assert sorted(r.number for r in status.pareto) == optuna_front
    assert len(optuna_front) == 4


def test_status_names_the_studies_when_asked_for_a_missing_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_table_study(url, name="one")
    run_table_study(url, name="two")
    with pytest.raises(StudyNotFoundError, match=r"holds 2 studies \(one, two\): name one with --study"):
        study_status(url)
    with pytest.raises(StudyNotFoundError, match="no study named 'three'.*studies: one, two"):
        study_status(url, "three")


def test_urls() -> None:
    assert normalize_url("results/s.db") == f"sqlite:///{Path('results/s.db').resolve()}"
    assert normalize_url("sqlite:///rel.db") == f"sqlite:///{Path('rel.db').resolve()}"
    assert normalize_url(None) == f"sqlite:///{Path('sweeper-study.db').resolve()}"
    assert redact("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    with pytest.raises(StorageError, match="not a database URL"):
        normalize_url("nosuch://x::y")


def test_optuna_dashboard_reads_the_same_database(storage_url: str) -> None:
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    run_table_study(storage_url, name="dash")
    app = optuna_dashboard.wsgi(storage_url)

    def get(path: str) -> dict:
        status: list[str] = []
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "x",
            "SERVER_PORT": "80",
            "wsgi.input": io.BytesIO(),
            "wsgi.url_scheme": "http",
        }
        body = b"".join(app(environ, lambda s, headers, *rest: status.append(s)))
        assert status[0].startswith("200"), status
        return json.loads(body)

    studies = get("/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["dash"]
    detail = get(f"/api/studies/{studies[0]['study_id']}")
    assert len(detail["trials"]) == len(TABLE)
    # our per-trial attributes are columns there; the dashboard's own "best trial"
    # ignores constraints (it reads the storage directly), so the gate shows as `feasible`
    assert {"tps", "ppl", "feasible"} <= {a["key"] for a in detail["union_user_attrs"]}
    first = {a["key"]: a["value"] for a in detail["trials"][0]["user_attrs"]}
    assert (first["tps"], first["feasible"]) == ("120.0", "False")
