"""Several workers of one study on one host: ``sweeper run --gpus 0,1,2,3``.

``--gpus`` lists the GPUs of this host that the run may use. They are split
into groups of the base manifest's ``TENSOR_PARALLEL_SIZE`` (1 when unset):
``--gpus 0,1,2,3`` is four workers on one GPU each, or two workers on
``0,1`` and ``2,3`` at ``TENSOR_PARALLEL_SIZE=2``. One group is one worker
in this process; several are one process each (``multiprocessing`` spawn),
all on the same study through the same storage URL, each running
``prepare`` and ``execute`` on the plan with its own group as ``gpus``.

Each worker's servers get ``CUDA_VISIBLE_DEVICES`` set to its group
(whatever the manifest says) and, so that several CPU servers do not fight
over cores, their own share of this process's CPU cores through
``VLLM_CPU_OMP_THREADS_BIND`` (read by vLLM's CPU backend only). A worker
writes its log to ``<run dir>/<study>/worker-<i>.log``; a worker whose
parent dies gets SIGTERM, so it stops like on Ctrl-C. Across hosts run one
``sweeper run --storage postgresql://... --gpus ...`` per host
(docs/distributed.md).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import multiprocessing
import os
import queue
import signal
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from storage import redact, study_status
from sweeper.devices import describe_device
from sweeper.errors import ERROR_ROOTS, StudyError
from sweeper.study import ConfirmSettings, StudyResult, standing
from sweeper.sweep._gpus import (
    WORKER_CPUS_VARIABLE,
    gpu_groups,
    parse_gpus,
    tensor_parallel_size,
)
from sweeper.sweep._plan import RunPlan
from sweeper.sweep._run import PreparedRun, execute, prepare, verify_answer

logger = logging.getLogger(__name__)

WORKER_INDEX_VARIABLE = "SWEEPER_WORKER"


def cpu_shares(workers: int, cores: Sequence[int] | None = None) -> list[str | None]:
    """This process's CPU cores split evenly between ``workers`` (``"0"``, ``"2,3"``).

    None for every worker when there are fewer cores than workers (they then share).
    """
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    share = len(cores) // workers
    if share == 0:
        logger.warning("%d workers on %d CPU cores: their servers share cores", workers, len(cores))
        return [None] * workers
    return [",".join(map(str, cores[i * share : (i + 1) * share])) for i in range(workers)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """One worker of a multi-GPU run: its number, GPUs, CPU cores and log file."""

    index: int
    gpus: tuple[str, ...]
    cpus: str | None = None
    log_path: str | None = None

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"WorkerSpec.index must be >= 0, not {self.index}")
        if not self.gpus:
            raise ValueError("WorkerSpec.gpus must name at least one GPU")

    @property
    def label(self) -> str:
        return f"worker {self.index} (GPU {','.join(self.gpus)})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerOutcome:
    """How one worker ended: its exit code, stop reason, trials run, or its error."""

    spec: WorkerSpec
    exitcode: int | None
    stop_reason: str | None = None
    trials_run: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exitcode == 0 and self.error is None


def worker_specs(
    groups: Sequence[Sequence[str]],
    log_folder: str | os.PathLike[str] | None = None,
    *,
    cores: Sequence[int] | None = None,
) -> list[WorkerSpec]:
    """One spec per GPU group, each with its share of ``cores`` (default: this process's).

    A group of several GPUs (tensor parallel) gets one core list per rank,
    joined by ``|`` as ``VLLM_CPU_OMP_THREADS_BIND`` takes them.
    """
    ranks = max(len(group) for group in groups)
    shares = cpu_shares(len(groups) * ranks, cores)
    per_worker = [shares[i * ranks : (i + 1) * ranks] for i in range(len(groups))]
    return [
        WorkerSpec(
            index=i,
            gpus=tuple(group),
            cpus=_bind_text(per_worker[i]),
            log_path=str(Path(log_folder) / f"worker-{i}.log") if log_folder else None,
        )
        for i, group in enumerate(groups)
    ]


# -- in each worker process ---------------------------------------------------------


def _bind_text(shares: Sequence[str | None]) -> str | None:
    """One worker's ranks' cores joined by ``|``; None when any rank shares cores."""
    cores = [share for share in shares if share is not None]
    return "|".join(cores) if len(cores) == len(shares) else None


def _die_with_parent() -> None:
    try:  # PR_SET_PDEATHSIG: SIGTERM this worker if the parent dies, even by SIGKILL
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        logger.warning("cannot ask for SIGTERM on the parent's death: a killed parent leaves me")


def _log_to(spec: WorkerSpec) -> None:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    prefix = f"[{spec.label}] "
    if spec.log_path:
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(spec.log_path)
        handler.setFormatter(logging.Formatter(f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    warnings = logging.StreamHandler()
    warnings.setLevel(logging.WARNING)
    warnings.setFormatter(logging.Formatter(f"{prefix}%(message)s"))
    root.addHandler(warnings)


def run_worker(plan: RunPlan, spec: WorkerSpec) -> tuple[str, int]:
    """One worker's run: the plan on its own GPUs (verification is left to the parent)."""
    plan = dataclasses.replace(plan, gpus=",".join(spec.gpus), verify_top=0)
    result = execute(prepare(plan))
    return result.stop_reason, result.trials_run


def _worker_main(
    target: Callable[[Any, WorkerSpec], tuple[str, int]],
    plan: Any,
    spec: WorkerSpec,
    results: Any,
) -> None:
    os.setpgid(0, 0)  # Ctrl-C reaches the parent only, which passes it on once
    _die_with_parent()
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(spec.gpus)
    os.environ[WORKER_INDEX_VARIABLE] = str(spec.index)
    if spec.cpus is not None:
        os.environ[WORKER_CPUS_VARIABLE] = spec.cpus
    _log_to(spec)
    logger.info("%s starts (pid %d, CPU cores %s)", spec.label, os.getpid(), spec.cpus or "shared")
    try:
        stop_reason, trials_run = target(plan, spec)
    except ERROR_ROOTS as exc:
        logger.error("%s stopped: %s", spec.label, exc)
        results.put((spec.index, None, 0, str(exc)))
        raise SystemExit(exc.exit_code) from None
    except BaseException as exc:
        logger.error("%s failed:\n%s", spec.label, traceback.format_exc())
        results.put((spec.index, None, 0, f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    results.put((spec.index, stop_reason, trials_run, None))


# -- in the parent ------------------------------------------------------------------


def run_workers(
    plan: Any,
    specs: Sequence[WorkerSpec],
    *,
    target: Callable[[Any, WorkerSpec], tuple[str, int]] = run_worker,
    while_running: Callable[[], None] | None = None,
    poll_s: float = 60.0,
) -> list[WorkerOutcome]:
    """Start one process per spec running ``target(plan, spec)``, wait for all of them.

    ``target`` must be importable by name (a module-level function): the
    workers are spawned, not forked. Each worker has a process group of its
    own; SIGINT (Ctrl-C) and SIGTERM to this process are passed on to every
    worker, which stops after marking its running trial. ``while_running()``
    is called every ``poll_s`` seconds until all have ended.
    """
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(
            target=_worker_main,
            args=(target, plan, spec, results),
            name=f"sweeper-worker-{spec.index}",
        )
        for spec in specs
    ]

    def forward(signum: int, _frame: Any) -> None:
        logger.warning("%s: passing it on to the workers", signal.Signals(signum).name)
        for process in processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signum)

    previous = signal.signal(signal.SIGTERM, forward)
    previous_int = signal.signal(signal.SIGINT, forward)
    try:
        for process, spec in zip(processes, specs):
            process.start()
            logger.info("%s: pid %d", spec.label, process.pid)
        for process in processes:
            while process.is_alive():
                process.join(timeout=poll_s)
                if process.is_alive() and while_running is not None:
                    try:
                        while_running()
                    except Exception:  # noqa: BLE001 - a display problem must not end the run
                        logger.exception("progress report failed")
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    reported: dict[int, tuple[str | None, int, str | None]] = {}
    for _ in specs:  # a worker killed outright reports nothing
        try:
            index, stop_reason, trials_run, error = results.get(timeout=1.0)
        except queue.Empty:
            break
        reported[index] = (stop_reason, trials_run, error)
    outcomes = []
    for process, spec in zip(processes, specs):
        stop_reason, trials_run, error = reported.get(
            spec.index, (None, 0, f"exited with code {process.exitcode} without a report")
        )
        outcomes.append(
            WorkerOutcome(
                spec=spec,
                exitcode=process.exitcode,
                stop_reason=stop_reason,
                trials_run=trials_run,
                error=error,
            )
        )
    return outcomes


def run_on_gpus(prepared: PreparedRun) -> StudyResult:
    """``sweeper run --gpus`` with several worker groups: the workers, then verification.

    Returns the study's ``StudyResult``; raises ``StudyError`` naming every
    worker that failed (the others' trials are stored all the same).
    """
    plan = prepared.plan
    assert plan.gpus is not None  # only a run with --gpus has workers
    groups = gpu_groups(parse_gpus(plan.gpus), tensor_parallel_size(prepared.manifest.env))
    specs = worker_specs(groups, Path(plan.run_dir) / prepared.study_name)
    for spec in specs:
        logger.info("%s, CPU cores %s, log %s", spec.label, spec.cpus or "shared", spec.log_path)
    outcomes = run_workers(plan, specs, while_running=lambda: _report(plan.storage, prepared.study_name))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise StudyError(
            "; ".join(f"{o.spec.label} stopped: {o.error}" for o in failed)
            + f" (logs in {Path(plan.run_dir) / prepared.study_name}; the other workers' "
            "trials are stored)"
        )
    verify_answer(prepared)  # once, after every worker is done (as execute does for one worker)
    reasons = sorted({o.stop_reason for o in outcomes if o.stop_reason})
    return StudyResult(
        study_name=prepared.study_name,
        storage=redact(plan.storage),
        stop_reason=",".join(reasons) or "stopped",
        trials_run=sum(o.trials_run for o in outcomes),
        status=study_status(plan.storage, prepared.study_name),
    )


def _report(storage: str, study_name: str) -> None:
    """One log line on the study while the workers run, and one per running trial."""
    status = study_status(storage, study_name)
    counts = status.counts
    # the study's confirmed best (its standing), not the single fastest figure
    now = standing(status.trials, ConfirmSettings.from_settings(status.settings))
    best = now.incumbent
    logger.info(
        "study %s: %d complete (%d pass the gate), %d failed, %d running; best %s",
        study_name,
        counts["COMPLETE"],
        counts["feasible"],
        counts["FAIL"],
        counts["RUNNING"],
        f"{best.describe()} at {now.tps_interval(best).value:.1f} tok/s{'' if now.confirmed else ', a race open'}"
        if best
        else "none yet",
    )
    for record in status.trials:
        if record.state == "running":
            where = describe_device(record.extras.get("device"))
            logger.info("  trial %d running on %s: %s", record.number, record.host, where)


def several_workers(plan: RunPlan, env: Mapping[str, str]) -> bool:
    """Does this plan's ``--gpus`` make more than one worker?"""
    gpus = getattr(plan, "gpus", None)
    if not gpus:
        return False
    return len(gpu_groups(parse_gpus(gpus), tensor_parallel_size(env))) > 1
