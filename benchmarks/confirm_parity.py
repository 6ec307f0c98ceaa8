"""Issue 19's confirming run, judged by the rule stated before it ran.

On 2026-12-03, after six device sessions of whole runs, the one session on a quiet host
read ours / harness 0.999 (0.990-1.008, 7 pairs) at 128 x 512. That session was singled out
after seeing the data, so docs/measurement.md ("Whole-run parity on the GPU", "How it will
be decided") states in advance which later session tests it and how:

* the confirming run is the next session whose host the probe calls quiet before its
  rounds (``host_before`` in the whole-run file: the probe's median ``cpu_ms`` under
  ``parity.QUIET_CPU_MS``, 1 ms, over the server's start and the per-request pass);
* it runs one per-request pass at 128 x 512 first, then the whole runs;
* it confirms when its whole-run interval (ours / harness, the geometric mean's 95 %
  interval, t on the log ratios as ``tps_vs_harness_client.py`` reports it) lies within
  0.98-1.02. A session on a busy host adds its pairs to the pool and tests nothing.

This script applies that rule to a session's files, so that the verdict is the rule's and
not a reading chosen after the fact. The cut and the band are fixed here on purpose: they
are not options. ::

    python benchmarks/confirm_parity.py part1/whole-128x512.json --per-request part1/per-request.json

It prints the host before the rounds, the whole-run ratio and its interval, the per-request
ratio (TPS, ours / harness, from the two clients' latencies of each prompt, with the
bootstrap interval ``tps_client_per_request.py`` prints), and one verdict line. Exit codes:

* 0: confirmed, with per-request figures of the same size from the same session (the
  issue's done-when);
* 1: a confirming run that does not confirm (the interval reaches outside the band, fewer
  than two complete pairs, or the sides did not make the same tokens from the same prompts);
* 2: bad input (a file missing or unreadable, no such size in it), with a one-line error;
* 3: not a confirming run (the host was busy before the rounds, or no probe ran);
* 4: the whole runs confirm but there are no per-request figures at that size from the
  session, so the done-when is not met.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import parity  # noqa: E402
from tps_client_per_request import geometric_interval, prompt_pairs  # noqa: E402
from tps_vs_harness_client import size_summary  # noqa: E402

SIZE = "128x512"  # the challenge's size, the one the rule is about
BAND = (0.98, 1.02)  # the done-when's band for the whole-run interval

CONFIRMED, NOT_CONFIRMED, BAD_INPUT, NOT_A_CONFIRMING_RUN, NO_PER_REQUEST = 0, 1, 2, 3, 4


class InputError(Exception):
    """A file that cannot be judged: missing, unreadable, or without the size."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerRequest:
    """TPS ours / harness per request: the inverse of the latency ratio of each prompt's two requests."""

    prompts: int
    output_tokens: int
    tps_ratio: float
    low: float
    high: float

    def describe(self) -> str:
        return (
            f"TPS ours / harness {self.tps_ratio:.4f} (95 % bootstrap interval {self.low:.4f} to "
            f"{self.high:.4f}; {self.prompts} prompts x {self.output_tokens} tokens)"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    code: int
    line: str
    host: parity.HostState | None = None
    whole: parity.RatioSummary | None = None
    per_request: PerRequest | None = None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from None


def host_before(entry: dict[str, Any]) -> parity.HostState | None:
    """The host before the rounds, judged again by the fixed cut (not by the flag the file stored)."""
    stored = entry.get("host_before")
    if not stored:
        return None
    fields = {f.name for f in dataclasses.fields(parity.HostState)} - {"quiet"}
    if not isinstance(stored, dict) or not fields <= stored.keys():
        raise InputError(f"host_before lacks {sorted(fields - set(stored or {}))}")
    values = {name: stored[name] for name in fields}
    return parity.HostState(**values, quiet=values["median_cpu_ms"] < parity.QUIET_CPU_MS)


def whole_runs(entry: dict[str, Any]) -> tuple[list[float], list[str]]:
    """ours / harness of every round where both completed (as the run's own summary takes them), and
    what makes the pairs unlike."""
    rounds = entry.get("rounds", [])
    summary = size_summary(rounds)
    problems = []
    if summary["ratios"] and not summary["same_tokens"]:
        problems.append("the sides did not generate the same number of tokens")
    if any(r["ours"].get("same_order") is False for r in rounds if r.get("ours", {}).get("ok")):
        problems.append("ours did not send the prompts in the harness's order")
    return summary["ratios"], problems


def per_request_figures(rows: list[dict[str, Any]], size: str) -> PerRequest | None:
    """The per-request pass's figures where its size is ``size`` (prompts x tokens); None otherwise."""
    prompts, tokens = (int(part) for part in size.split("x"))
    pairs = [p for p in prompt_pairs(rows).values() if p.get("ours", {}).get("ok") and p.get("harness", {}).get("ok")]
    distinct = {r["prompt_id"] for r in rows}
    if not pairs or len(distinct) != prompts or any(r["output_tokens"] != tokens for r in rows):
        return None
    latency, low, high = geometric_interval([p["ours"]["latency_s"] / p["harness"]["latency_s"] for p in pairs])
    return PerRequest(prompts=len(distinct), output_tokens=tokens, tps_ratio=1 / latency, low=1 / high, high=1 / low)


def judge(whole_path: Path, per_request_path: Path | None, *, size: str = SIZE) -> Verdict:
    report = _read_json(whole_path)
    sizes = report.get("sizes") if isinstance(report, dict) else None
    entry = sizes.get(size) if isinstance(sizes, dict) else None
    if not isinstance(entry, dict):
        raise InputError(f"{whole_path}: no whole runs at {size}")
    try:
        host = host_before(entry)
    except InputError as exc:
        raise InputError(f"{whole_path}: {exc}") from None
    if host is None:
        return Verdict(code=NOT_A_CONFIRMING_RUN, line="not a confirming run: no probe before the rounds")
    if not host.quiet:
        return Verdict(
            code=NOT_A_CONFIRMING_RUN,
            host=host,
            line=f"not a confirming run: the host was busy before the rounds (median cpu_ms "
            f"{host.median_cpu_ms:.3f}, the cut {parity.QUIET_CPU_MS}); its pairs go to the pool",
        )
    per_request = None
    if per_request_path is not None:
        rows = _read_json(per_request_path)
        if not isinstance(rows, list):
            raise InputError(f"{per_request_path}: not a per-request file (a list of requests)")
        try:
            per_request = per_request_figures(rows, size)
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{per_request_path}: a request without its figures ({exc!r})") from None
    try:
        ratios, problems = whole_runs(entry)
    except (KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        raise InputError(f"{whole_path}: a round without its figures ({exc!r})") from None
    if len(ratios) < 2:
        return Verdict(
            code=NOT_CONFIRMED,
            host=host,
            per_request=per_request,
            line=f"does not confirm: {len(ratios)} complete pair(s), an interval needs two",
        )
    whole = parity.ratio_summary(ratios)
    if problems:
        return Verdict(
            code=NOT_CONFIRMED,
            host=host,
            whole=whole,
            per_request=per_request,
            line=f"does not confirm: {'; '.join(problems)}",
        )
    inside = BAND[0] <= whole.low and whole.high <= BAND[1]
    interval = f"whole-run interval {whole.low:.4f} to {whole.high:.4f}"
    if not inside:
        return Verdict(
            code=NOT_CONFIRMED,
            host=host,
            whole=whole,
            per_request=per_request,
            line=f"does not confirm: the {interval} reaches outside {BAND[0]}-{BAND[1]}",
        )
    if per_request is None:
        return Verdict(
            code=NO_PER_REQUEST,
            host=host,
            whole=whole,
            line=f"whole runs confirm (the {interval} lies within {BAND[0]}-{BAND[1]}), but the "
            f"session has no per-request figures at {size}: the done-when is not met",
        )
    return Verdict(
        code=CONFIRMED,
        host=host,
        whole=whole,
        per_request=per_request,
        line=f"confirmed: the {interval} lies within {BAND[0]}-{BAND[1]}, with per-request "
        f"figures at {size} from the same session",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("whole", type=Path, help="the session's whole-run file (tps_vs_harness_client.py --out)")
    parser.add_argument(
        "--per-request", type=Path, help="the session's per-request file (tps_client_per_request.py --json)"
    )
    args = parser.parse_args(argv)
    try:
        verdict = judge(args.whole, args.per_request)
    except InputError as exc:
        print(f"confirm_parity: {exc}", file=sys.stderr)
        return BAD_INPUT
    print(f"{SIZE}, the confirming-run rule of docs/measurement.md (stated 2026-12-03):")
    if verdict.host:
        print(f"  the host before the rounds: {verdict.host.describe()}")
    if verdict.whole:
        print(f"  whole runs, ours / harness: {verdict.whole.describe()}")
    if verdict.per_request:
        print(f"  per request, the same session: {verdict.per_request.describe()}")
    print(f"verdict: {verdict.line}")
    return verdict.code


if __name__ == "__main__":
    sys.exit(main())
