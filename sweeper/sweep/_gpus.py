"""The GPUs and CPU cores of one worker: ``--gpus`` parsed, split by tensor parallel size, its slot.

``prepare`` (one worker) and ``run_on_gpus`` (several, ``_workers``) both
read ``--gpus`` through these.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from sweeper.devices import DeviceSlot, open_devices
from sweeper.errors import UserInputError

logger = logging.getLogger(__name__)

TENSOR_PARALLEL_VARIABLE = "TENSOR_PARALLEL_SIZE"
# set by the parent in each worker's environment: that worker's CPU cores
WORKER_CPUS_VARIABLE = "SWEEPER_WORKER_CPUS"


# what CUDA_VISIBLE_DEVICES takes besides an index: a GPU's or a MIG instance's UUID
GPU_UUID_PREFIXES = ("GPU-", "MIG-")


def parse_gpus(text: str) -> tuple[str, ...]:
    """``"0,1,2,3"`` -> ``("0", "1", "2", "3")``; ids may also be GPU UUIDs."""
    gpus = tuple(part.strip() for part in str(text).split(","))
    if not gpus or "" in gpus:
        raise UserInputError(f"--gpus {text!r}: expected GPU ids separated by commas, e.g. 0,1,2,3")
    bad = [g for g in gpus if not (g.isdigit() or g.startswith(GPU_UUID_PREFIXES))]
    if bad:
        raise UserInputError(
            f"--gpus {text!r}: {', '.join(map(repr, bad))} is no GPU id (an index such as 0, or a UUID "
            f"starting with {' or '.join(GPU_UUID_PREFIXES)})"
        )
    doubled = sorted({g for g in gpus if gpus.count(g) > 1})
    if doubled:
        raise UserInputError(f"--gpus {text!r}: GPU {', '.join(doubled)} listed twice")
    return gpus


def tensor_parallel_size(env: Mapping[str, str]) -> int:
    text = str(env.get(TENSOR_PARALLEL_VARIABLE, "1") or "1")
    try:
        size = int(text)
    except ValueError:
        raise UserInputError(f"{TENSOR_PARALLEL_VARIABLE}={text!r} is not a whole number") from None
    if size < 1:
        raise UserInputError(f"{TENSOR_PARALLEL_VARIABLE}={size} must be at least 1")
    return size


def gpu_groups(gpus: Sequence[str], tensor_parallel: int = 1) -> tuple[tuple[str, ...], ...]:
    """The GPUs split into one group per worker, ``tensor_parallel`` GPUs each, in order."""
    if len(gpus) % tensor_parallel:
        raise UserInputError(
            f"--gpus {','.join(gpus)}: {len(gpus)} GPU(s) do not split into groups of "
            f"{TENSOR_PARALLEL_VARIABLE}={tensor_parallel}"
        )
    return tuple(tuple(gpus[i : i + tensor_parallel]) for i in range(0, len(gpus), tensor_parallel))


def worker_slot(gpus: str | None, env: Mapping[str, str]) -> DeviceSlot:
    """The device slot of this process's worker, for a plan's ``gpus`` and its manifest's env.

    ``gpus`` given: exactly those, set as the servers' ``CUDA_VISIBLE_DEVICES``
    (one group only: several groups are several workers, see ``run_workers``).
    Not given: the GPUs the server will use are watched but nothing is set:
    the first ``TENSOR_PARALLEL_SIZE`` of this process's ``CUDA_VISIBLE_DEVICES``
    (or of the host's GPUs).
    """
    tensor_parallel = tensor_parallel_size(env)
    cpus = os.environ.get(WORKER_CPUS_VARIABLE) or None
    backend = open_devices()
    if gpus is not None:
        listed = parse_gpus(gpus)
        gpu_groups(listed, tensor_parallel)  # the whole list must split into groups
        return DeviceSlot(backend, gpus=listed, cpus=cpus)
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = parse_gpus(inherited) if inherited else backend.device_ids()
    if not visible or not backend.device_ids():  # no GPU to watch (a CPU machine)
        return DeviceSlot(backend, gpus=None, set_visible=False, cpus=cpus)
    return DeviceSlot(backend, gpus=visible[:tensor_parallel], set_visible=False, cpus=cpus)
