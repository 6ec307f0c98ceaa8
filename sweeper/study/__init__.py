"""The quality-gated search: ``run_study`` over a pluggable ``Evaluator``.

Holds the Optuna wiring (options, samplers, the guided search), the PPL
gate, one trial's bookkeeping and the recovery of trials a dead worker left
running, the recipe a study was measured with, and the plan that starts a
study from an existing manifest. It knows nothing of HTTP: what measures a
configuration comes in through the ``Evaluator`` seam.
"""

from sweeper.study._evaluator import (
    EvaluationContext,
    Evaluator,
    Measurement,
    TimedPhases,
    TrialContext,
    TrialEvent,
)
from sweeper.study._from_manifest import (
    ImportPlan,
    SearchedParameter,
    default_space_for,
    describe_value,
    model_text,
    plan_from_manifest,
)
from sweeper.study._gate import (
    CONSTRAINT,
    PPL_GATE_CONFIDENCE,
    GateVerdict,
    PplGate,
    measured_uncertainty,
    record_rows,
    trial_pass_probability,
    uncertainty_extras,
)
from sweeper.study._guided import GuidedPlan
from sweeper.study._options import StudyOptions, StudyOptionsError, parse_duration
from sweeper.study._ppl_statement import PPL_INTERVAL_LEVEL, PplStatement, ppl_statement, probability_text
from sweeper.study._race_decision import (
    FUTILITY_RATIO,
    Claim,
    Outcome,
    claim_confidence,
    distance_to_base,
    look,
    race_confidence,
)
from sweeper.study._race_replay import ROUNDS_DF_ENOUGH, standing
from sweeper.study._race_settings import DEFAULT_NOISE, ConfirmSettings, ConfirmSettingsError
from sweeper.study._recipe import (
    MEASURING_FIELDS,
    DataDefaults,
    StoredStudy,
    StudyRecipe,
    base_manifest_of,
    read_stored_study,
    recipe_changes,
    recipe_from_settings,
    save_recipe,
)
from sweeper.study._run import StudyResult, public_settings, run_study
from sweeper.study._sampling import DEFAULT_SAMPLER, MODES, SAMPLERS
from sweeper.study._standing import (
    CONFIRM_ROLE,
    ClaimBasis,
    Configuration,
    Decision,
    Race,
    Standing,
    confirmation_role,
    is_confirmation,
)
from sweeper.study._trial_outcome import is_baseline
from sweeper.study._window_readings import Observation

__all__ = [
    "CONFIRM_ROLE",
    "CONSTRAINT",
    "DEFAULT_NOISE",
    "DEFAULT_SAMPLER",
    "FUTILITY_RATIO",
    "MEASURING_FIELDS",
    "MODES",
    "PPL_GATE_CONFIDENCE",
    "PPL_INTERVAL_LEVEL",
    "ROUNDS_DF_ENOUGH",
    "SAMPLERS",
    "Claim",
    "ClaimBasis",
    "Configuration",
    "ConfirmSettings",
    "ConfirmSettingsError",
    "DataDefaults",
    "Decision",
    "EvaluationContext",
    "Evaluator",
    "GateVerdict",
    "GuidedPlan",
    "ImportPlan",
    "Measurement",
    "Observation",
    "Outcome",
    "PplGate",
    "PplStatement",
    "Race",
    "SearchedParameter",
    "Standing",
    "StoredStudy",
    "StudyOptions",
    "StudyOptionsError",
    "StudyRecipe",
    "StudyResult",
    "TimedPhases",
    "TrialContext",
    "TrialEvent",
    "base_manifest_of",
    "claim_confidence",
    "confirmation_role",
    "default_space_for",
    "describe_value",
    "distance_to_base",
    "is_baseline",
    "is_confirmation",
    "look",
    "measured_uncertainty",
    "model_text",
    "parse_duration",
    "plan_from_manifest",
    "ppl_statement",
    "probability_text",
    "public_settings",
    "race_confidence",
    "read_stored_study",
    "recipe_changes",
    "recipe_from_settings",
    "record_rows",
    "run_study",
    "save_recipe",
    "standing",
    "trial_pass_probability",
    "uncertainty_extras",
]
