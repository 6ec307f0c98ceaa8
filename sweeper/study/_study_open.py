"""A study opened for one worker's run: created with its settings and first trials, or resumed.

A new study stores its settings (mode, gate, races, space) and queues its
first trials (the space's own, the ``enqueue`` configurations, the base's
first under a relative cap or ``enqueue_base``), then marks them queued
(``ENQUEUED_ATTR``). A resumed study must have the same mode and gate; a
worker that joins a study just created waits for that mark, its dead
trials are recovered, and its first trials are queued again where a dead
run left them out.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Any, Literal

import optuna

import sweeper
from search_spaces import BASELINE, SearchSpace
from storage import STUDY_ATTR_PREFIX, optuna_storage, redact
from sweeper.errors import StudyError
from sweeper.study._gate import PplGate, study_settings
from sweeper.study._options import StudyOptions
from sweeper.study._recovery import ROLE_ATTR
from sweeper.study._sampling import make_sampler

logger = logging.getLogger(__name__)

ENQUEUED_ATTR = f"{STUDY_ATTR_PREFIX}enqueued"
DIRECTIONS: dict[str, list[Literal["maximize", "minimize"]]] = {"tps": ["maximize"], "pareto": ["maximize", "minimize"]}


def open_study(
    space: SearchSpace,
    options: StudyOptions,
    *,
    url: str,
    recover: Callable[[optuna.Study], None],
) -> tuple[optuna.Study, PplGate]:
    """The study of ``options`` in the storage at ``url``, and the gate it is judged by.

    ``recover``: called on a resumed study before its first trials are queued
    again (the trials a dead worker left running).
    """
    opts = options
    storage = optuna_storage(url)
    sampler = make_sampler(opts.sampler, space=space, mode=opts.mode, seed=opts.seed)
    try:
        if opts.gate is None:  # resuming only: a new study needs its gate
            try:
                study = optuna.load_study(study_name=opts.study_name, storage=storage, sampler=sampler)
            except KeyError:
                raise StudyError(f"study {opts.study_name!r} is new: give a PPL cap (ppl_cap or ppl_cap_rel)") from None
            created = False
        else:
            study = optuna.create_study(
                study_name=opts.study_name,
                storage=storage,
                sampler=sampler,
                directions=DIRECTIONS[opts.mode],
            )
            created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=opts.study_name, storage=storage, sampler=sampler)
        created = False
    if created and opts.gate is not None:  # a study is created only with a gate
        with warnings.catch_warnings():  # experimental since Optuna 3.2, still there in 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["tps"] if opts.mode == "tps" else ["tps", "ppl"])
        for key, value in _settings(space, opts, opts.gate).items():
            study.set_user_attr(STUDY_ATTR_PREFIX + key, value)
        gate: PplGate = opts.gate
        _enqueue(study, space, opts, gate, first_time=True)
        study.set_user_attr(ENQUEUED_ATTR, True)
        logger.info("created study %s in %s", opts.study_name, redact(url))
    else:
        gate = _check_resumed(study, space, opts)
        _wait_for_creator(study)
        recover(study)
        _enqueue(study, space, opts, gate, first_time=False)
    return study, gate


def _settings(space: SearchSpace, options: StudyOptions, gate: PplGate | None) -> dict[str, Any]:
    """What a study stores of how it measures (its ``study_settings``)."""
    return {
        "mode": options.mode,
        **(gate.to_settings() if gate else {}),
        **options.confirm.to_settings(),
        "space": space.name,
        "quality_params": list(space.quality_names),
        "sweeper_version": sweeper.__version__,
    }


def _check_resumed(study: optuna.Study, space: SearchSpace, options: StudyOptions) -> PplGate:
    """The stored gate of a resumed study, once its mode and gate agree with ``options``."""
    opts = options
    stored = study_settings(study.user_attrs)
    if stored.get("mode", opts.mode) != opts.mode:
        raise StudyError(
            f"study {opts.study_name!r} runs in mode {stored['mode']!r}, not {opts.mode!r}: "
            f"use the same mode or another study name"
        )
    stored_gate = PplGate.from_study_attrs(study.user_attrs)
    if stored_gate is None:
        # created by a run that died before writing its settings
        if opts.gate is None:
            raise StudyError(f"study {opts.study_name!r} has no gate stored: give a PPL cap")
        for key, value in _settings(space, opts, opts.gate).items():
            study.set_user_attr(STUDY_ATTR_PREFIX + key, value)
        study.set_user_attr(ENQUEUED_ATTR, True)
        return opts.gate
    if opts.gate is not None and opts.gate != stored_gate:
        raise StudyError(
            f"study {opts.study_name!r} was started with the gate {stored_gate.describe()}, "
            f"not {opts.gate.describe()}: use the same cap or another study name"
        )
    logger.info("resuming study %s (%d trials so far)", opts.study_name, len(study.trials))
    return stored_gate


def _wait_for_creator(study: optuna.Study, timeout_s: float = 60.0) -> None:
    """A worker that joins a study just created waits until its first trials are queued."""
    deadline = time.monotonic() + timeout_s
    while not study.user_attrs.get(ENQUEUED_ATTR):
        if time.monotonic() > deadline:
            logger.warning("the study's creator never queued its first trials; going on")
            return
        time.sleep(0.5)


def _enqueue(
    study: optuna.Study, space: SearchSpace, options: StudyOptions, gate: PplGate, *, first_time: bool
) -> None:
    """Queue the study's first trials (module docstring); once each, by name and params."""
    configs: list[tuple[str, dict[str, Any]]] = []
    if options.enqueue_space_configs:
        configs += space.enqueued_params()
    configs += [(f"enqueued-{i}", space.check_params(c, f"enqueue[{i}]")) for i, c in enumerate(options.enqueue)]
    if gate.relative or options.enqueue_base:
        baseline = space.base_values()
        configs = [(BASELINE, baseline)] + [(n, p) for n, p in configs if n != BASELINE]
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, params in configs:
        key = repr(sorted(params.items()))
        if key in seen:  # the same config under two names: one trial, both names
            seen[key] = (f"{seen[key][0]}+{name}", params)
        else:
            seen[key] = (name, params)
    for name, params in seen.values():
        study.enqueue_trial(params, user_attrs={ROLE_ATTR: name}, skip_if_exists=not first_time)
