"""The quality-gated search: ``run_study`` over a pluggable ``Evaluator``.

Holds the Optuna wiring (options, samplers, the guided search), the PPL
gate, one trial's bookkeeping and the recovery of trials a dead worker left
running, the recipe a study was measured with, and the plan that starts a
study from an existing manifest. It knows nothing of HTTP: what measures a
configuration comes in through the ``Evaluator`` seam.
"""

from sweeper.study._confirm import (
    CONFIRM_ROLE,
    ClaimBasis,
    confirmation_role,
    ConfirmSettings,
    Configuration,
    Decision,
    Race,
    Standing,
    distance_to_base,
    is_confirmation,
    standing,
)
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
    plan_from_manifest,
)
from sweeper.study._gate import CONSTRAINT, PplGate
from sweeper.study._guided import GuidedPlan, Observation
from sweeper.study._options import StudyOptions, parse_duration
from sweeper.study._recipe import (
    MEASURING_FIELDS,
    StudyRecipe,
    base_manifest_of,
    recipe_changes,
    recipe_from_settings,
    save_recipe,
    stored_recipe,
)
from sweeper.study._run import StudyResult, run_study
from sweeper.study._sampling import DEFAULT_SAMPLER, MODES, SAMPLERS

__all__ = [
    "CONFIRM_ROLE",
    "ClaimBasis",
    "confirmation_role",
    "ConfirmSettings",
    "Configuration",
    "Decision",
    "Race",
    "Standing",
    "distance_to_base",
    "is_confirmation",
    "standing",
    "CONSTRAINT",
    "DEFAULT_SAMPLER",
    "MEASURING_FIELDS",
    "MODES",
    "SAMPLERS",
    "EvaluationContext",
    "Evaluator",
    "GuidedPlan",
    "ImportPlan",
    "Measurement",
    "Observation",
    "PplGate",
    "SearchedParameter",
    "StudyOptions",
    "StudyRecipe",
    "StudyResult",
    "TimedPhases",
    "TrialContext",
    "TrialEvent",
    "base_manifest_of",
    "default_space_for",
    "describe_value",
    "parse_duration",
    "plan_from_manifest",
    "recipe_changes",
    "recipe_from_settings",
    "run_study",
    "save_recipe",
    "stored_recipe",
]
