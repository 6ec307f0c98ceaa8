"""The study's answer: the best feasible candidates, their verification, the export.

``study_answer`` picks what the study claims; ``verify_study`` re-measures
the candidates on held-out data in fresh servers and ``judge`` decides;
``export_answer`` writes the verified winner as a challenge manifest.
"""

from sweeper.answer._candidates import (
    Answer,
    Verdict,
    candidates,
    judge,
    ranked_answers,
    study_answer,
    verify_command,
)
from sweeper.answer._export import (
    ExportResult,
    NothingToExportError,
    UnverifiedAnswerError,
    derived_name,
    export_answer,
)
from sweeper.answer._heldout import (
    HeldOutData,
    HeldOutDataError,
    heldout_data,
    heldout_evaluator,
    heldout_settings,
    heldout_sources,
)
from sweeper.answer._verify import (
    VerifyEvent,
    VerifyResult,
    VerifySettings,
    VerifySettingsError,
    verify_study,
)

__all__ = [
    "Answer",
    "ExportResult",
    "HeldOutData",
    "HeldOutDataError",
    "NothingToExportError",
    "UnverifiedAnswerError",
    "Verdict",
    "VerifyEvent",
    "VerifyResult",
    "VerifySettings",
    "VerifySettingsError",
    "candidates",
    "derived_name",
    "export_answer",
    "heldout_data",
    "heldout_evaluator",
    "heldout_settings",
    "heldout_sources",
    "judge",
    "ranked_answers",
    "study_answer",
    "verify_command",
    "verify_study",
]
