"""A run's data: the tuning sets, where the held-out sets come from, the measuring settings.

``run_data`` resolves the plan's data options (the demo's bundled sets when
it runs the demo) or names every option still needed; ``eval_settings`` puts
the plan's sizes on the tuning data. ``demo_data`` and ``demo_models`` are the
demo's defaults that the commands hand down to the layers below.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from evaluators import PplSettings, TpsSettings, WarmupSettings
from sweeper.demo import demo_paths
from sweeper.errors import UserInputError
from sweeper.manifest import Manifest
from sweeper.measure import DataSplit, EvalSettings, warmup_settings_from
from sweeper.study import DataDefaults
from sweeper.sweep._plan import DEMO_PRESET, RunPlan

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunData:
    """The data sources of a run: tuning sets, and where the held-out sets come from."""

    prompts: str
    ppl_data: str
    heldout_prompts: str | None  # None: split off ``prompts`` by ``split``
    heldout_ppl_data: str | None
    split: DataSplit | None  # the tuning part, where a held-out set is split off

    @property
    def prompts_split(self) -> DataSplit | None:
        return self.split if self.heldout_prompts is None else None

    @property
    def ppl_split(self) -> DataSplit | None:
        return self.split if self.heldout_ppl_data is None else None


def demo_data() -> DataDefaults:
    """The bundled demo's data sets, the defaults that the commands hand down: what a study
    recipe that records no tuning set stands for, and the held-out sets that go with them."""
    demo = demo_paths()
    return DataDefaults(
        prompts=demo.prompts_tuning,
        ppl_data=demo.ppl_tuning,
        heldout_prompts=demo.prompts_heldout,
        heldout_ppl_data=demo.ppl_heldout,
    )


def demo_models() -> dict[str | os.PathLike[str], str]:
    """The local model folders with a preset of their own (``default_space_for``): the
    bundled demo's model, searched with ``DEMO_PRESET``."""
    return {demo_paths().model: DEMO_PRESET}


def run_data(plan: RunPlan, manifest_label: str) -> RunData:
    """The plan's data, or one UserInputError naming every option still needed.

    The demo tunes on its bundled tuning sets and verifies on its bundled
    held-out sets; a held-out set that is neither given nor split off is
    missing unless its tuning set is the demo's.
    """
    demo = demo_paths()
    prompts = plan.prompts or (str(demo.prompts_tuning) if plan.demo else None)
    ppl_data = plan.ppl_data or (str(demo.ppl_tuning) if plan.demo else None)
    missing = [option for option, value in (("--prompts", prompts), ("--ppl-data", ppl_data)) if not value]
    split = None
    if plan.heldout_fraction is not None:
        split = DataSplit(heldout_fraction=plan.heldout_fraction, seed=plan.split_seed, part="tuning")
    heldout: dict[str, str | None] = {}
    heldout_missing = []
    for option, given, tuning, bundled, demo_tuning in (
        ("--heldout-prompts", plan.heldout_prompts, prompts, demo.prompts_heldout, demo.prompts_tuning),
        ("--heldout-ppl-data", plan.heldout_ppl_data, ppl_data, demo.ppl_heldout, demo.ppl_tuning),
    ):
        if given:
            heldout[option] = given
        elif split is not None:
            heldout[option] = None
        elif tuning and _same_file(tuning, demo_tuning):
            heldout[option] = str(bundled)
        else:
            heldout[option] = None
            heldout_missing.append(option)
    if missing or heldout_missing:
        needs = []
        if missing:
            needs.append(
                f"its data: {' and '.join(missing)} (a file or hub dataset id each, as 'sweeper eval' takes them)"
            )
        if heldout_missing:
            needs.append(
                f"held-out data for verify: {' and '.join(heldout_missing)}, or --heldout-fraction F "
                "[--split-seed S] to split it off the tuning data"
            )
        what = "the demo with your own data" if plan.demo else f"a run of {manifest_label}"
        raise UserInputError(f"{what} needs {', and '.join(needs)}")
    return RunData(
        prompts=str(prompts),
        ppl_data=str(ppl_data),
        heldout_prompts=heldout["--heldout-prompts"],
        heldout_ppl_data=heldout["--heldout-ppl-data"],
        split=split,
    )


def _same_file(a: str, b: Path) -> bool:
    path = Path(a).expanduser()
    return path.exists() and path.resolve() == b.resolve()


def eval_settings(
    plan: RunPlan, run_dir: Path, data: RunData | None = None, manifest: Manifest | None = None
) -> EvalSettings:
    """The study's measuring settings: the plan's sizes on the tuning data."""
    if data is None:
        data = run_data(plan, plan.manifest or "the demo")
    sizes = plan.sizes
    screen = plan.screen_sizes()
    warmup = warmup_settings_from(manifest) if manifest is not None else WarmupSettings()
    if sizes.warmup_prompts is not None:
        warmup = dataclasses.replace(warmup, num_prompts=sizes.warmup_prompts)
    return EvalSettings(
        prompts=data.prompts,
        ppl_data=data.ppl_data,
        prompts_split=data.prompts_split,
        ppl_split=data.ppl_split,
        tps=TpsSettings(
            num_prompts=sizes.num_prompts,
            output_len=sizes.output_len,
            warmup_requests=sizes.warmup_requests,
        ),
        ppl=PplSettings(max_records=sizes.ppl_records),
        screen=None
        if screen is None
        else TpsSettings(num_prompts=screen[0], output_len=screen[1], warmup_requests=sizes.warmup_requests),
        warmup=warmup,
        ready_timeout_s=plan.ready_timeout_s,
        keep_port=plan.keep_port,
        log_path=run_dir / "eval.log",
    )
