"""Measuring a configuration: start its server, run the evaluators, stop it.

``evaluate(manifest, settings)`` is the one place that turns a manifest
into measured TPS, PPL and fidelity; ``sweeper eval``, every study trial
(through ``ServerEvaluator``) and every verification repeat go through it.
"""

from sweeper.measure._evaluate import (
    DataSplit,
    EvalData,
    EvalResult,
    EvalSettings,
    Measure,
    ServerHooks,
    evaluate,
    load_eval_data,
    measure_server,
    warmup_settings_from,
)
from sweeper.measure._phases import (
    PHASE_LABELS,
    PhaseTime,
    TimeByPhase,
    duration_text,
    phase_headline,
    phase_rows,
    start_seconds,
    time_by_phase,
)
from sweeper.measure._server_evaluator import ServerEvaluator, starts_warm

__all__ = [
    "PHASE_LABELS",
    "PhaseTime",
    "TimeByPhase",
    "time_by_phase",
    "duration_text",
    "phase_headline",
    "phase_rows",
    "start_seconds",
    "DataSplit",
    "EvalData",
    "EvalResult",
    "EvalSettings",
    "Measure",
    "ServerEvaluator",
    "starts_warm",
    "ServerHooks",
    "evaluate",
    "load_eval_data",
    "measure_server",
    "warmup_settings_from",
]
