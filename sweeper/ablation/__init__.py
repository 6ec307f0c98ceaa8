"""Ablation: which switches of a manifest earn their place, and whether they keep the outputs.

``find_switches`` picks the switches, ``AblationArms`` gives each arm's env,
``schedule`` the order of the fresh servers (blocks of switches around a
shared base, in rounds), ``tps_effects`` and ``report_switches`` the
figures and the verdicts (``judge_switch``: the one place a switch's verdict is
decided), ``export_value`` what the exported manifest sets; ``run_ablation`` measures a
whole ablation server by server (stored, resumable), ending with the
closing race of the exported manifest against the original
(``closing_race``, ``judge_closing``), and ``analyse`` judges a stored one.
"""

from __future__ import annotations

from sweeper.ablation._closing import (
    DEFAULT_CLOSING_PAIRS,
    EXPORTED,
    ORIGINAL,
    ClosingPair,
    ClosingRace,
    closing_race,
    pair_order,
)
from sweeper.ablation._run import (
    AblationPlan,
    AblationResult,
    StoredAblation,
    analyse,
    close_ablation,
    exported_changes,
    follow_up_switches,
    judge_stored,
    plan_from_record,
    run_ablation,
)
from sweeper.ablation._schedule import DEFAULT_BLOCK_SIZE, Slot, blocks, schedule, servers_per_round
from sweeper.ablation._switches import AblationArms, AblationMode, Switch, find_switches
from sweeper.ablation._text import (
    changes_text,
    closing_text,
    effect_text,
    failures_text,
    outputs_text,
    ppl_text,
    study_wide_level,
)
from sweeper.ablation._verdict import (
    PPL_SAME_WITHIN,
    ClosingVerdict,
    OutputCheck,
    PplCheck,
    SlotFigure,
    Speed,
    SwitchReport,
    SwitchVerdict,
    TpsEffects,
    export_value,
    judge_closing,
    judge_switch,
    output_check,
    ppl_check,
    report_switches,
    speed_of,
    study_level,
    tps_effects,
)

__all__ = [
    "changes_text",
    "closing_text",
    "effect_text",
    "failures_text",
    "outputs_text",
    "ppl_text",
    "study_wide_level",
    "DEFAULT_CLOSING_PAIRS",
    "EXPORTED",
    "ORIGINAL",
    "ClosingPair",
    "ClosingRace",
    "ClosingVerdict",
    "close_ablation",
    "closing_race",
    "exported_changes",
    "follow_up_switches",
    "judge_stored",
    "StoredAblation",
    "judge_closing",
    "pair_order",
    "AblationPlan",
    "AblationResult",
    "analyse",
    "plan_from_record",
    "run_ablation",
    "DEFAULT_BLOCK_SIZE",
    "PPL_SAME_WITHIN",
    "AblationArms",
    "AblationMode",
    "OutputCheck",
    "PplCheck",
    "Slot",
    "SlotFigure",
    "Speed",
    "Switch",
    "SwitchReport",
    "TpsEffects",
    "SwitchVerdict",
    "blocks",
    "export_value",
    "find_switches",
    "judge_switch",
    "output_check",
    "ppl_check",
    "report_switches",
    "schedule",
    "servers_per_round",
    "speed_of",
    "study_level",
    "tps_effects",
]
