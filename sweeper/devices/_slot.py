"""DeviceSlot: the GPUs one worker's servers run on, and the memory rules around each start.

A worker reads the used memory of its GPUs when it starts (the idle
figure). Before each server start ``wait_until_free`` waits until every one
of them is back within ``tolerance_mib`` of that figure; when the deadline
passes it stops the sweeper servers (processes carrying
``SWEEPER_SERVER_TOKEN``) that hold memory on those GPUs, waits again, and
raises a ``ServerError`` naming the PIDs that still hold it. While a server
runs, ``watch()`` samples the memory in a background thread for the peak
recorded with the trial.

Only sweeper's own servers are ever stopped, and only those on this
worker's GPUs: a process is one when NVML lists it on one of them, or when
its ``CUDA_VISIBLE_DEVICES`` names one of them (NVML inside a container may
list host PIDs that mean nothing here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from sweeper.devices._backend import DeviceBackend, NoDevices
from sweeper.errors import ServerError, UserInputError

logger = logging.getLogger(__name__)

CUDA_DEVICES_VARIABLE = "CUDA_VISIBLE_DEVICES"
CPU_BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryWait:
    """How closely and how long a worker waits for its GPUs' memory before a server start.

    ``tolerance_mib``: how far above the idle figure counts as free;
    ``timeout_s``: the first wait; ``after_stop_s``: the wait after stopping
    sweeper servers; ``poll_s``: between reads; ``sample_s``: between the
    peak sampler's reads while a server runs.
    """

    tolerance_mib: float = 1024.0
    timeout_s: float = 120.0
    after_stop_s: float = 60.0
    poll_s: float = 1.0
    sample_s: float = 0.5

    def __post_init__(self) -> None:
        if not self.tolerance_mib >= 0:
            raise ValueError(f"MemoryWait.tolerance_mib must be >= 0, not {self.tolerance_mib}")
        for name in ("timeout_s", "after_stop_s", "poll_s", "sample_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MemoryWait.{name} must be positive, not {getattr(self, name)}")


def _default_stop_server(token: str) -> list[int]:
    from sweeper.serving import stop_servers_with_token

    return stop_servers_with_token(token)


def _token_processes() -> dict[int, tuple[str, str | None]]:
    """Processes carrying a sweeper server token: pid -> (token, their CUDA_VISIBLE_DEVICES)."""
    from sweeper.serving import TOKEN_VARIABLE
    from sweeper.serving.processes import environ_of, pids_with_variable

    found = {}
    for pid, token in pids_with_variable(TOKEN_VARIABLE).items():
        environ = environ_of(pid) or {}
        found[pid] = (token, environ.get(CUDA_DEVICES_VARIABLE))
    return found


def describe_device(device: Mapping[str, str] | None) -> str:
    """A stored ``DeviceSlot.describe()`` as shown to people: ``"GPU 2,3, CPU cores 1"``."""
    device = device or {}
    text = f"GPU {device['gpus']}" if device.get("gpus") else "no GPU recorded"
    if device.get("cpus"):
        text += f", CPU cores {device['cpus']}"
    return text


class MemorySampler:
    """Reads the slot's GPUs every ``interval_s`` in a daemon thread; ``peak_mib`` per GPU."""

    def __init__(self, backend: DeviceBackend, devices: Sequence[str], interval_s: float) -> None:
        self.backend = backend
        self.devices = tuple(devices)
        self.interval_s = interval_s
        self.peak_mib: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-sampler", daemon=True)

    def _read(self) -> None:
        for device in self.devices:
            used = self.backend.used_memory_mib(device)
            self.peak_mib[device] = max(self.peak_mib.get(device, used), used)
        self.samples += 1

    def _run(self) -> None:
        while True:
            try:
                self._read()
            except Exception as exc:  # noqa: BLE001 - a failed read must not end the trial
                logger.warning("GPU memory sampling stopped: %s", exc)
                return
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> MemorySampler:
        if self.devices:
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=10.0)

    @property
    def peak(self) -> float | None:
        """The highest reading of any of the GPUs (None: nothing was read)."""
        return max(self.peak_mib.values()) if self.peak_mib else None


class DeviceSlot:
    """The GPUs (and CPU cores) that one worker's servers run on.

    ``gpus``: the device ids of this worker's servers (None: every GPU the
    backend sees). With ``set_visible`` its servers get
    ``CUDA_VISIBLE_DEVICES`` set to them, whatever the manifest says;
    without, the slot only watches them. ``cpus``: a core list (``"0"``,
    ``"2-3"``) for vLLM's CPU backend (``VLLM_CPU_OMP_THREADS_BIND``), so that
    several CPU servers do not share cores. The idle figure is read here.
    """

    def __init__(
        self,
        backend: DeviceBackend | None = None,
        *,
        gpus: Sequence[str] | None = None,
        set_visible: bool = True,
        cpus: str | None = None,
        wait: MemoryWait | None = None,
        stop_server: Callable[[str], list[int]] = _default_stop_server,
        token_processes: Callable[[], dict[int, tuple[str, str | None]]] = _token_processes,
    ) -> None:
        self.backend = backend if backend is not None else NoDevices()
        self.gpus = None if gpus is None else tuple(str(g).strip() for g in gpus)
        if self.gpus is not None and (not self.gpus or "" in self.gpus):
            raise UserInputError(f"--gpus: not a list of GPU ids: {','.join(self.gpus)!r}")
        self.set_visible = set_visible and self.gpus is not None
        self.cpus = cpus
        self.wait = wait or MemoryWait()
        self._stop_server = stop_server
        self._token_processes = token_processes
        known = self.backend.device_ids()
        if self.gpus is None:
            self.watched = known
        elif isinstance(self.backend, NoDevices):
            self.watched = ()
            logger.info(
                "GPUs %s given but not watched (%s): only CUDA_VISIBLE_DEVICES is set",
                ",".join(self.gpus),
                self.backend.reason,
            )
        else:
            self.watched = self.gpus
        self.idle: dict[str, float] = {}
        for device in self.watched:
            try:
                self.idle[device] = self.backend.used_memory_mib(device)
            except KeyError as exc:
                raise UserInputError(f"--gpus: {exc.args[0]} (this host has {', '.join(known) or 'none'})") from None
        if self.idle:
            logger.info(
                "GPU memory at worker start: %s",
                ", ".join(f"GPU {d} {mib:.0f} MiB" for d, mib in self.idle.items()),
            )
        self._versions: dict[str, str] | None = None

    # -- what the servers get, what the trial records ------------------------------

    def server_env(self) -> dict[str, str]:
        """Env entries every server of this worker gets on top of its manifest's."""
        env = {}
        if self.set_visible and self.gpus is not None:  # (set_visible implies gpus)
            env[CUDA_DEVICES_VARIABLE] = ",".join(self.gpus)
        if self.cpus is not None:
            env[CPU_BIND_VARIABLE] = self.cpus
        return env

    def describe(self) -> dict[str, str]:
        """The slot as stored with a running trial (``sweeper status`` shows it)."""
        data = {"devices": self.backend.kind}
        gpus = self.gpus if self.gpus is not None else self.watched
        if gpus:
            data["gpus"] = ",".join(gpus)
        if self.cpus is not None:
            data["cpus"] = self.cpus
        return data

    def versions(self) -> dict[str, str]:
        """GPU name, driver and CUDA versions, for the trial's provenance (empty without GPUs)."""
        if self._versions is None:
            versions: dict[str, str] = {}
            names = []
            for device in self.watched:
                name = self.backend.name(device)
                if name not in names:
                    names.append(name)
            if names:
                versions["gpu"] = " + ".join(names)
                versions["gpu_count"] = str(len(self.watched))
                for label, value in (
                    ("nvidia_driver", self.backend.driver_version()),
                    ("cuda_driver", self.backend.cuda_version()),
                ):
                    if value:
                        versions[label] = value
            self._versions = versions
        return dict(self._versions)

    # -- before a start ------------------------------------------------------------

    def _over_idle(self) -> dict[str, float]:
        """GPUs whose memory is above idle + tolerance now, with their reading."""
        over = {}
        for device in self.watched:
            used = self.backend.used_memory_mib(device)
            # a lower reading than at start means the start figure was not idle
            self.idle[device] = min(self.idle[device], used)
            if used > self.idle[device] + self.wait.tolerance_mib:
                over[device] = used
        return over

    def _wait_free(self, timeout_s: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout_s
        while True:
            over = self._over_idle()
            if not over or time.monotonic() >= deadline:
                return over
            time.sleep(min(self.wait.poll_s, max(0.0, deadline - time.monotonic())))

    def _sweeper_servers(self) -> dict[str, list[int]]:
        """Sweeper servers on this slot's GPUs: token -> the PIDs that carry it."""
        holders = {pid for device in self.watched for pid in self.backend.pids(device)}
        ours = set(self.watched)
        found: dict[str, list[int]] = {}
        for pid, (token, visible) in self._token_processes().items():
            named = {part.strip() for part in (visible or "").split(",")} & ours
            if pid in holders or named:
                found.setdefault(token, []).append(pid)
        return found

    def wait_until_free(self) -> None:
        """Return once every GPU is back near idle; else stop sweeper servers on them,
        wait again, and raise ``ServerError`` if the memory is still taken."""
        if not self.watched:
            return
        began = time.monotonic()
        over = self._wait_free(self.wait.timeout_s)
        if not over:
            return
        servers = self._sweeper_servers()
        stopped: list[int] = []
        for token, pids in servers.items():
            logger.warning(
                "GPU memory not back to idle after %.0f s: stopping sweeper server %s (PIDs %s)",
                time.monotonic() - began,
                token,
                pids,
            )
            stopped += self._stop_server(token) or pids
        if stopped:
            over = self._wait_free(self.wait.after_stop_s)
            if not over:
                logger.info("GPU memory free again after stopping PIDs %s", sorted(stopped))
                return
        raise ServerError(self._held_message(over, stopped, time.monotonic() - began))

    def _held_message(self, over: dict[str, float], stopped: list[int], waited: float) -> str:
        parts = []
        for device, used in over.items():
            pids = self.backend.pids(device)
            held = f"PIDs {', '.join(map(str, pids))}" if pids else "PIDs (none listed by the driver)"
            parts.append(
                f"GPU memory still held by {held} on GPU {device}: {used:.0f} MiB in use, "
                f"{self.idle[device]:.0f} MiB when the worker started "
                f"(tolerance {self.wait.tolerance_mib:.0f} MiB)"
            )
        message = "; ".join(parts) + f", after waiting {waited:.0f} s"
        if stopped:
            message += f" and stopping sweeper server PIDs {', '.join(map(str, sorted(stopped)))}"
        else:
            message += " (no sweeper server holds it: another program uses this GPU)"
        return message

    # -- while a server runs ----------------------------------------------------------

    def sampler(self) -> MemorySampler:
        """A not yet started sampler of this slot's GPUs."""
        return MemorySampler(self.backend, self.watched, self.wait.sample_s)

    @contextlib.contextmanager
    def watch(self) -> Iterator[MemorySampler]:
        """Sample the GPUs' memory while the block runs (``sampler.peak_mib`` afterwards)."""
        sampler = self.sampler().start()
        try:
            yield sampler
        finally:
            sampler.stop()

    def close(self) -> None:
        self.backend.close()
