"""A whole ``sweeper run``: the plan, checked before any server starts, then study and verify.

``RunPlan`` holds every choice of one run (the defaults run the CPU demo);
``prepare`` checks manifest, space and data and builds the evaluator;
``execute`` runs the study and, when asked, verifies its answer;
``run_on_gpus`` runs one worker process per GPU group of ``--gpus``.
"""

from sweeper.sweep._gpu_demo import gpu_demo_options
from sweeper.sweep._gpus import gpu_groups, worker_slot
from sweeper.sweep._plan import (
    CHALLENGE_SIZES,
    CONFIRM_ROUNDS,
    DEMO_CONFIRM_ROUNDS,
    DEMO_PRESET,
    DEMO_SIZES,
    DEMO_STORAGE,
    DEMO_STUDY,
    DEMO_TRIALS,
    GPU_DEMO_NOISE,
    RunPlan,
    RunSizes,
)
from sweeper.sweep._run import PreparedRun, execute, prepare
from sweeper.sweep._run_data import RunData, demo_data, demo_models
from sweeper.sweep._workers import (
    WorkerOutcome,
    WorkerSpec,
    run_on_gpus,
    run_workers,
    several_workers,
)

__all__ = [
    "CHALLENGE_SIZES",
    "CONFIRM_ROUNDS",
    "DEMO_CONFIRM_ROUNDS",
    "DEMO_PRESET",
    "GPU_DEMO_NOISE",
    "DEMO_SIZES",
    "DEMO_STORAGE",
    "DEMO_STUDY",
    "DEMO_TRIALS",
    "demo_data",
    "demo_models",
    "execute",
    "gpu_demo_options",
    "gpu_groups",
    "prepare",
    "PreparedRun",
    "run_on_gpus",
    "run_workers",
    "RunData",
    "RunPlan",
    "RunSizes",
    "several_workers",
    "worker_slot",
    "WorkerOutcome",
    "WorkerSpec",
]
