"""The study's answer: the best feasible candidates, their verification, the export.

``study_answer`` picks what the study claims; ``verify_study`` re-measures
the candidates on held-out data in fresh servers and ``judge_candidate`` decides;
``export_answer`` writes the verified winner as a challenge manifest;
``rerun_against_base`` re-measures any exported answer beside its base, as
the organizers' re-run would.
"""

from sweeper.answer._candidates import (
    Answer,
    AnswerStatus,
    CandidateVerdict,
    candidates,
    heldout_speedup,
    judge_candidate,
    ranked_answers,
    speedup_text,
    study_answer,
    verify_command,
)
from sweeper.answer._export import (
    ExportResult,
    NothingToExportError,
    UnverifiedAnswerError,
    derived_name,
    export_answer,
    place_manifest,
)
from sweeper.answer._figure import answer_figure, answer_tps, configuration_tps, tps_figure_text, tps_text
from sweeper.answer._heldout import (
    HeldOutData,
    HeldOutDataError,
    heldout_data,
    heldout_evaluator,
    heldout_settings,
    heldout_sources,
)
from sweeper.answer._pareto import configuration_pareto
from sweeper.answer._rerun import (
    RerunPair,
    RerunResult,
    RerunSettings,
    RerunSettingsError,
    rerun_against_base,
)
from sweeper.answer._study_data import ServerCount, configuration_data, study_data
from sweeper.answer._verify import verify_study
from sweeper.answer._verify_result import VerifyEvent, VerifyResult, heldout_statement, heldout_text
from sweeper.answer._verify_settings import BaseConfiguration, VerifySettings, VerifySettingsError, base_configuration

__all__ = [
    "configuration_pareto",
    "place_manifest",
    "Answer",
    "AnswerStatus",
    "BaseConfiguration",
    "CandidateVerdict",
    "ExportResult",
    "HeldOutData",
    "HeldOutDataError",
    "NothingToExportError",
    "RerunPair",
    "RerunResult",
    "RerunSettings",
    "RerunSettingsError",
    "ServerCount",
    "UnverifiedAnswerError",
    "VerifyEvent",
    "VerifyResult",
    "VerifySettings",
    "VerifySettingsError",
    "answer_figure",
    "answer_tps",
    "base_configuration",
    "candidates",
    "configuration_data",
    "configuration_tps",
    "derived_name",
    "export_answer",
    "heldout_data",
    "heldout_evaluator",
    "heldout_settings",
    "heldout_sources",
    "heldout_speedup",
    "judge_candidate",
    "ranked_answers",
    "rerun_against_base",
    "speedup_text",
    "tps_figure_text",
    "tps_text",
    "study_answer",
    "study_data",
    "verify_command",
    "heldout_statement",
    "heldout_text",
    "verify_study",
]
