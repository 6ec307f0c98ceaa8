"""Whole-run parity pooled over device sessions: ours / harness from every round on record.

One device session fits 3-7 rounds at 128 x 512, and an interval within 0.98-1.02 needs
about 26 (docs/measurement.md, "Whole-run parity on the GPU"), so the figure is pooled
over sessions. The rounds measured so far are kept in a record,
``benchmarks/results/gpu-parity-rounds.csv``: one row a round, with the run it belongs to,
the size, which client ran first, both TPS figures, and the host probe's means over each
side's timed window where a probe ran (``host_probe.py``; empty otherwise). This script
reads that record, adds the rounds of new result files of ``tps_vs_harness_client.py``
(``--out``), and prints, for the rows that match the filters:

* each run's geometric mean of ours / harness and its 95 % interval, and how busy its
  host was: the probe's ``cpu_ms`` over its rounds (0.77 ms on a quiet H200 host, 1.25-1.81
  on busy ones, where the server's speed also moves in stretches of 10-40 s);
* the pooled geometric mean and interval over all the matching rounds (t on the log
  ratios, ``parity.ratio_summary``), and how many pairs an interval within 0.98-1.02
  would need at that spread;
* for each probe figure, the ratio at equal host speed over the rounds that have it
  (``parity.adjusted_ratio``: the log ratio fitted on the log of the probe's ratio);
* the pooled figure over the runs on quiet hosts, and over those on busy ones
  (``--quiet-cpu-ms``, 1 ms), and over runs without a probe;
* over the rounds whose server's own time is on record (vLLM's end-to-end time per
  request, from its ``/metrics``, over each side's run), that time ours / harness, and
  ours / harness with it held equal: the TPS ratio times the server's time ratio, what
  the two clients and the API server's path add, apart from how fast the server ran.

::

    python benchmarks/pool_parity.py --size 128x512 --server-cpus 2-5
    python benchmarks/pool_parity.py --add 2026-12-03T09:00Z=whole-128x512.json --server-cpus 2-5 \\
        [--ours-connection harness] [--save]

``--add LABEL=FILE`` takes the rounds of FILE where both sides completed (the side
``ours``, measure_tps's default protocol of that run, against ``harness``), labelled with
the run's LABEL (its date and time, say) and ``--server-cpus`` (the CPUs the server was
pinned to, ``any`` for none; the result file does not record it). ``--save`` appends them
to the record; a label already there is refused, so a run is never counted twice.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import parity  # noqa: E402

RECORD = Path(__file__).resolve().parent / "results" / "gpu-parity-rounds.csv"
PROBE_KEYS = ("cpu_ms", "mem_ms", "gpu_ms")
# A run's host is quiet when the probe's cpu_ms over its rounds is under this (see parity.QUIET_CPU_MS).
QUIET_CPU_MS = parity.QUIET_CPU_MS
HOST_CLASSES = ("quiet", "busy", "no probe")
ROUND_FIELDS = ("run", "size", "round", "first", "server_cpus", "ours_connection", "harness_tps", "ours_tps")
# the server's own end-to-end time per request (ms) over each side's run; records written before these
# columns were kept lack them, and rounds measured before have them blank
SERVER_FIELDS = ("server_e2e_ms_harness", "server_e2e_ms_ours")
FIELDS = (*ROUND_FIELDS, *(f"probe_{key}_{side}" for key in PROBE_KEYS for side in ("harness", "ours")), *SERVER_FIELDS)


class RecordError(ValueError):
    """A record or result file that cannot be read as rounds (its path and what is wrong)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Round:
    """One round of whole runs: both clients' TPS, and the probe's means over each side's run."""

    run: str
    size: str
    round: int
    first: str
    server_cpus: str
    ours_connection: str
    harness_tps: float
    ours_tps: float
    probe: dict[str, tuple[float, float]]  # key -> (during the harness's run, during ours)
    server_e2e_ms: tuple[float, float] | None = None  # the server's own time per request: (harness, ours)

    @property
    def ratio(self) -> float:
        return self.ours_tps / self.harness_tps

    @property
    def server_time_ratio(self) -> float | None:
        """The server's own end-to-end time per request, ours / harness (None where not on record)."""
        return self.server_e2e_ms[1] / self.server_e2e_ms[0] if self.server_e2e_ms else None

    @property
    def ratio_at_equal_server_time(self) -> float | None:
        """TPS ours / harness had the server been as fast in both runs: what the clients and the API path add.

        A run's wall time is the server's own time for its requests plus what lies outside it (the
        client, the HTTP and API server's path, the gaps between requests), so TPS ours / harness
        is the server's time ratio, inverted, times the ratio of those outside shares.
        """
        server = self.server_time_ratio
        return self.ratio * server if server else None

    @property
    def host_cpu_ms(self) -> float | None:
        """The probe's ``cpu_ms`` over both sides' runs (their geometric mean): how busy the host was."""
        during = self.probe.get("cpu_ms")
        return math.sqrt(during[0] * during[1]) if during else None

    def row(self) -> dict[str, str]:
        row = {name: str(getattr(self, name)) for name in ROUND_FIELDS}
        for key in PROBE_KEYS:
            harness, ours = self.probe.get(key, ("", ""))
            row[f"probe_{key}_harness"], row[f"probe_{key}_ours"] = str(harness), str(ours)
        harness, ours = self.server_e2e_ms or ("", "")
        row["server_e2e_ms_harness"], row["server_e2e_ms_ours"] = str(harness), str(ours)
        return row


def _positive(text: str, where: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RecordError(f"{where}: {name} is not a number: {text!r}") from None
    if not value > 0:
        raise RecordError(f"{where}: {name} must be positive, not {text!r}")
    return value


def load_record(path: Path) -> list[Round]:
    """The rounds of a record file (see the module's docstring); an absent file holds none."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in FIELDS if name not in (reader.fieldnames or []) and name not in SERVER_FIELDS]
        if missing:
            raise RecordError(f"{path}: the record has no column {missing[0]!r}")
        rounds = []
        for line, row in enumerate(reader, start=2):
            where = f"{path}, line {line}"
            probe = {}
            for key in PROBE_KEYS:
                harness, ours = row[f"probe_{key}_harness"].strip(), row[f"probe_{key}_ours"].strip()
                if harness and ours:
                    probe[key] = (
                        _positive(harness, where, f"probe_{key}_harness"),
                        _positive(ours, where, f"probe_{key}_ours"),
                    )
            server = None
            harness, ours = ((row.get(name) or "").strip() for name in SERVER_FIELDS)
            if harness or ours:
                server = (
                    _positive(harness, where, "server_e2e_ms_harness"),
                    _positive(ours, where, "server_e2e_ms_ours"),
                )
            if row["first"] not in ("harness", "ours"):
                raise RecordError(f"{where}: first is 'harness' or 'ours', not {row['first']!r}")
            try:
                number = int(row["round"])
            except ValueError:
                raise RecordError(f"{where}: round is not a whole number: {row['round']!r}") from None
            rounds.append(
                Round(
                    run=row["run"],
                    size=row["size"],
                    round=number,
                    first=row["first"],
                    server_cpus=row["server_cpus"],
                    ours_connection=row["ours_connection"],
                    harness_tps=_positive(row["harness_tps"], where, "harness_tps"),
                    ours_tps=_positive(row["ours_tps"], where, "ours_tps"),
                    probe=probe,
                    server_e2e_ms=server,
                )
            )
    return rounds


def rounds_from_result(path: Path, *, run: str, server_cpus: str) -> list[Round]:
    """The complete rounds of a ``tps_vs_harness_client.py --out`` file, side ``ours`` against the harness."""
    try:
        data = json.loads(path.read_text())
        sizes: dict[str, Any] = data["sizes"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise RecordError(f"{path}: not a result file of tps_vs_harness_client.py ({error})") from None
    connection = str(data.get("ours_connection") or "harness").split(",")[0]
    rounds = []
    for size, entry in sizes.items():
        for row in entry.get("rounds", []):
            harness, ours = row.get("harness") or {}, row.get("ours") or {}
            if not (harness.get("ok") and ours.get("ok")):
                continue
            order = [side for side in row.get("order", []) if side in ("harness", "ours")]
            probe = {}
            for key in PROBE_KEYS:
                during = ((harness.get("probe") or {}).get(key), (ours.get("probe") or {}).get(key))
                if all(during):
                    probe[key] = (float(during[0]), float(during[1]))
            server = (server_e2e_ms(harness), server_e2e_ms(ours))
            rounds.append(
                Round(
                    run=run,
                    size=size,
                    round=int(row["round"]),
                    first=order[0] if order else "",
                    server_cpus=server_cpus,
                    ours_connection=connection,
                    harness_tps=float(harness["tps"]),
                    ours_tps=float(ours["tps"]),
                    probe=probe,
                    server_e2e_ms=server if all(server) else None,
                )
            )
    return rounds


def server_e2e_ms(side: dict[str, Any]) -> float | None:
    """A side's server end-to-end time per request in ms (its ``/metrics`` deltas; its warm-up included)."""
    served = side.get("server") or {}
    return parity.ms_per_request(served, "e2e_s") if served.get("requests") and served.get("e2e_s") else None


def save_record(path: Path, rounds: list[Round]) -> None:
    """Append ``rounds`` to the record (written whole to a temporary file, then moved into place)."""
    kept = load_record(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        for item in [*kept, *rounds]:
            writer.writerow(item.row())
    partial.replace(path)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pooled:
    """The pooled figures over a set of rounds."""

    by_run: dict[str, parity.RatioSummary]
    host_cpu_ms: dict[str, float | None]  # run -> the probe's cpu_ms over its rounds (geometric mean)
    pooled: parity.RatioSummary
    pairs_needed: int | None
    adjusted: dict[str, parity.AdjustedRatio]
    quiet_cpu_ms: float
    by_host: dict[str, parity.RatioSummary]  # "quiet", "busy", "no probe" -> the rounds of those runs
    server_time: parity.RatioSummary | None  # the server's own time per request, ours / harness
    at_equal_server_time: parity.RatioSummary | None  # TPS ours / harness with that time held equal


def host_class(host_cpu_ms: float | None, quiet_cpu_ms: float) -> str:
    """A run's host: 'quiet' with the probe's cpu_ms under ``quiet_cpu_ms``, 'busy' at or over it."""
    if host_cpu_ms is None:
        return "no probe"
    return "quiet" if host_cpu_ms < quiet_cpu_ms else "busy"


def pool(rounds: list[Round], *, half_width: float = 0.02, quiet_cpu_ms: float = QUIET_CPU_MS) -> Pooled:
    if not rounds:
        raise RecordError("no rounds match: nothing to pool")
    by_run: dict[str, list[float]] = {}
    probed: dict[str, list[float]] = {}
    for item in rounds:
        by_run.setdefault(item.run, []).append(item.ratio)
        if item.host_cpu_ms is not None:
            probed.setdefault(item.run, []).append(math.log(item.host_cpu_ms))
    host_cpu_ms = {run: math.exp(sum(probed[run]) / len(probed[run])) if run in probed else None for run in by_run}
    by_host: dict[str, list[float]] = {}
    for item in rounds:
        by_host.setdefault(host_class(host_cpu_ms[item.run], quiet_cpu_ms), []).append(item.ratio)
    pooled = parity.ratio_summary([item.ratio for item in rounds])
    needed = parity.pairs_for_interval(pooled.log_sd, half_width) if pooled.log_sd else None
    adjusted = {}
    for key in PROBE_KEYS:
        covered = [item for item in rounds if key in item.probe]
        if len(covered) >= 3:
            covariate = [math.log(item.probe[key][1] / item.probe[key][0]) for item in covered]
            adjusted[key] = parity.adjusted_ratio([item.ratio for item in covered], covariate)
    timed = [item for item in rounds if item.server_e2e_ms]
    server_time = parity.ratio_summary([item.server_time_ratio for item in timed]) if timed else None
    equal_server = parity.ratio_summary([item.ratio_at_equal_server_time for item in timed]) if timed else None
    return Pooled(
        by_run={run: parity.ratio_summary(ratios) for run, ratios in by_run.items()},
        host_cpu_ms=host_cpu_ms,
        pooled=pooled,
        pairs_needed=needed,
        adjusted=adjusted,
        quiet_cpu_ms=quiet_cpu_ms,
        by_host={name: parity.ratio_summary(by_host[name]) for name in HOST_CLASSES if name in by_host},
        server_time=server_time,
        at_equal_server_time=equal_server,
    )


def select(
    rounds: list[Round], *, size: str | None, server_cpus: str | None, ours_connection: str | None
) -> list[Round]:
    return [
        item
        for item in rounds
        if (size is None or item.size == size)
        and (server_cpus is None or item.server_cpus == server_cpus)
        and (ours_connection is None or item.ours_connection == ours_connection)
    ]


def report(rounds: list[Round], result: Pooled) -> None:
    for run, summary in result.by_run.items():
        host = result.host_cpu_ms[run]
        probe = f"; host: probe cpu_ms {host:.3f}, {host_class(host, result.quiet_cpu_ms)}" if host else ""
        print(f"  {run}: ours / harness {summary.describe()}{probe}")
    print(f"pooled over {len(rounds)} rounds of {len(result.by_run)} runs: ours / harness {result.pooled.describe()}")
    if result.pairs_needed:
        print(f"  at this spread an interval within 0.98-1.02 needs about {result.pairs_needed} pairs")
    for name, summary in result.by_host.items():
        which = {
            "quiet": f"on quiet hosts (the probe's cpu_ms over the run under {result.quiet_cpu_ms:g} ms)",
            "busy": f"on busy hosts (the probe's cpu_ms over the run {result.quiet_cpu_ms:g} ms or more)",
            "no probe": "without a probe",
        }[name]
        print(f"runs {which}: ours / harness {summary.describe()}")
    for key, fit in result.adjusted.items():
        print(f"at equal host speed by the probe's {key}: {fit.describe()}")
        if fit.residual_sd:
            print(
                f"  at its residual spread an interval within 0.98-1.02 needs about "
                f"{parity.pairs_for_interval(fit.residual_sd, 0.02)} pairs"
            )
    if result.server_time and result.at_equal_server_time:
        runs = len({item.run for item in rounds if item.server_e2e_ms})
        print(
            f"the server's own time per request (vLLM's e2e), ours / harness, over the {result.server_time.count} "
            f"rounds of {runs} runs that have it: {result.server_time.describe()}"
        )
        print(
            f"  ours / harness with that time held equal (what the clients and the API path add): "
            f"{result.at_equal_server_time.describe()}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--record",
        type=Path,
        default=RECORD,
        help="the rounds on record (default: benchmarks/results/gpu-parity-rounds.csv)",
    )
    parser.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="a result file of tps_vs_harness_client.py (--out), its rounds labelled LABEL",
    )
    parser.add_argument("--server-cpus", help="the added runs' server CPUs ('any' for none); also a filter")
    parser.add_argument("--size", help="only rounds of this size (128x512)")
    parser.add_argument("--ours-connection", help="only rounds where ours used this protocol (harness, keep-alive)")
    parser.add_argument(
        "--quiet-cpu-ms",
        type=float,
        default=QUIET_CPU_MS,
        help="a run's host counts as quiet when the probe's cpu_ms over its rounds is under "
        f"this ({QUIET_CPU_MS:g}); the rounds are pooled by host too",
    )
    parser.add_argument("--save", action="store_true", help="append the added rounds to the record")
    args = parser.parse_args(argv)
    try:
        if not (math.isfinite(args.quiet_cpu_ms) and args.quiet_cpu_ms > 0):
            raise RecordError(f"--quiet-cpu-ms must be a positive number of ms, not {args.quiet_cpu_ms:g}")
        rounds = load_record(args.record)
        added: list[Round] = []
        for item in args.add:
            label, _, name = item.partition("=")
            if not label or not name:
                raise RecordError(f"--add takes LABEL=FILE, not {item!r}")
            if not args.server_cpus:
                raise RecordError("--add needs --server-cpus (the CPUs the server ran on, or 'any')")
            if label in {r.run for r in rounds + added}:
                raise RecordError(f"--add: the run {label!r} is already on record in {args.record}")
            found = rounds_from_result(Path(name), run=label, server_cpus=args.server_cpus)
            if not found:
                raise RecordError(f"{name}: no round where both sides completed")
            added += found
        chosen = select(
            rounds + added, size=args.size, server_cpus=args.server_cpus, ours_connection=args.ours_connection
        )
        report(chosen, pool(chosen, quiet_cpu_ms=args.quiet_cpu_ms))
        if args.save and added:
            save_record(args.record, added)
            print(f"{len(added)} rounds added to {args.record}")
    except RecordError as error:
        print(f"pool_parity: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
