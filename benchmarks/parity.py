"""What the harness-parity benchmark (``tps_vs_harness_client.py``) needs beside HTTP and the server.

Kept free of both so that the tests can check it on its own: the geometric
mean of paired ratios with a t interval on their logs (Student's t from
``evaluators.intervals``), the parsing of a ``bench_serving`` result line,
the client-side gaps between requests, the server's ``/metrics`` counters,
and the host's and a process tree's CPU time from ``/proc``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluators.intervals import t_quantile

# the server's own counters and histogram sums, read before and after each run
SERVER_COUNTERS = {
    "requests": "vllm:e2e_request_latency_seconds_count",
    "e2e_s": "vllm:e2e_request_latency_seconds_sum",
    "queue_s": "vllm:request_queue_time_seconds_sum",
    "prefill_s": "vllm:request_prefill_time_seconds_sum",
    "decode_s": "vllm:request_decode_time_seconds_sum",
    "inference_s": "vllm:request_inference_time_seconds_sum",
    "ttft_s": "vllm:time_to_first_token_seconds_sum",
    "itl_s": "vllm:inter_token_latency_seconds_sum",
    "itl_count": "vllm:inter_token_latency_seconds_count",
    "tpot_s": "vllm:request_time_per_output_token_seconds_sum",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}


def counters_from_samples(samples: Mapping[str, Sequence[tuple[Mapping[str, str], float]]]) -> dict[str, float]:
    """``SERVER_COUNTERS`` from parsed ``/metrics`` samples, summed over labels (engines); 0 when absent."""
    return {key: float(sum(v for _, v in samples.get(name, []))) for key, name in SERVER_COUNTERS.items()}


def counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in before}


def ms_per_request(served: Mapping[str, float], key: str) -> float:
    """A server time sum of a run's counter deltas (``e2e_s``, ``decode_s``, ...) per request, in ms.

    The requests counted are all the run sent, its warm-up's included.
    """
    return served[key] / max(served["requests"], 1) * 1000


# -- prompts -------------------------------------------------------------------------------------


def sharegpt_records(prompts: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """(id, text) pairs as ShareGPT records the harness's loader keeps: it drops records of one turn."""
    return [
        {"id": pid, "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}]}
        for pid, text in prompts
    ]


def extend_prompts(prompts: Sequence[tuple[str, str]], count: int) -> list[tuple[str, str]]:
    """``count`` distinct prompts from ``prompts``: the set, then its prompts with the words reversed.

    The demo has 64 prompts (48 tuning, 16 held out) and the challenge's size
    is 128. A copy of a prompt would be served from the prefix cache; its
    words reversed are a prompt of the same length with another prefix.
    """
    chosen = list(prompts[:count])
    passes = 1
    while len(chosen) < count:
        for pid, text in prompts:
            if len(chosen) == count:
                break
            words = text.split()
            variant = " ".join(reversed(words)) if passes % 2 == 1 else " ".join(words[1:] + words[:1])
            chosen.append((f"{pid}-v{passes}", variant))
        passes += 1
        if passes > 8:
            raise ValueError(f"cannot make {count} prompts from {len(prompts)}")
    return chosen


# -- a bench_serving run -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class HarnessRun:
    """What ``bench_serving --output-file F --output-details`` wrote (its last line)."""

    tps: float
    duration_s: float
    completed: int
    output_tokens: int
    latencies_s: tuple[float, ...]
    output_lens: tuple[int, ...]
    input_lens: tuple[int, ...]
    errors: tuple[str, ...]


def parse_harness_result(text: str) -> HarnessRun:
    """The last JSON line of a ``bench_serving`` output file.

    With ``--disable-stream`` its ``ttfts`` are the requests' whole
    latencies ("For non-streaming, TTFT = total latency" in its source).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the bench_serving output file is empty")
    record = json.loads(lines[-1])
    for field in ("output_throughput", "duration", "ttfts", "output_lens"):
        if field not in record:
            raise ValueError(f"the bench_serving result has no {field!r} (run it with --output-details)")
    return HarnessRun(
        tps=float(record["output_throughput"]),
        duration_s=float(record["duration"]),
        completed=int(record["completed"]),
        output_tokens=int(record["total_output_tokens"]),
        latencies_s=tuple(float(x) for x in record["ttfts"]),
        output_lens=tuple(int(x) for x in record["output_lens"]),
        input_lens=tuple(int(x) for x in record.get("input_lens", [])),
        errors=tuple(e for e in record.get("errors", []) if e),
    )


def gap_summary(duration_s: float, latencies_s: Sequence[float]) -> dict[str, float]:
    """Client-side time of a run outside its requests: the wall clock less the sum of latencies."""
    total = duration_s - sum(latencies_s)
    return {"gap_total_s": total, "gap_per_request_ms": total / max(len(latencies_s), 1) * 1000}


def gaps_between(ends_s: Sequence[float], latencies_s: Sequence[float]) -> list[float]:
    """The gaps between consecutive requests, from each request's end time and latency.

    Request i started at ``ends[i] - latencies[i]``; the gap before request
    i + 1 is its start less the end of request i.
    """
    if len(ends_s) != len(latencies_s):
        raise ValueError(f"{len(ends_s)} end times for {len(latencies_s)} latencies")
    return [(ends_s[i + 1] - latencies_s[i + 1]) - ends_s[i] for i in range(len(ends_s) - 1)]


# -- CPU time from /proc -------------------------------------------------------------------------


def host_cpu_jiffies(stat_text: str | None = None) -> tuple[int, int]:
    """(busy, total) jiffies of the whole host from ``/proc/stat``'s first line."""
    text = stat_text if stat_text is not None else Path("/proc/stat").read_text()
    fields = [int(x) for x in text.splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def process_tree_cpu_s(root_pid: int) -> float:
    """utime + stime (s) of a process and its live descendants, from ``/proc/<pid>/stat``."""
    return sum(process_cpu_s(pid) or 0.0 for pid in process_tree(root_pid))


def process_tree(root_pid: int) -> set[int]:
    """A process and its live descendants."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(text[text.rfind(")") + 2 :].split()[1])
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return tree


def process_cpu_s(pid: int) -> float | None:
    """utime + stime (s) of one live process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def cpu_in_last(samples: Sequence[tuple[float, float]], end_s: float, window_s: float, total_s: float) -> float:
    """CPU seconds a process used in its last ``window_s`` before ``end_s``.

    ``samples`` are (time, CPU seconds so far) read while it ran, ``total_s``
    its CPU time at the end. The window starts at the last sample at or
    before ``end_s - window_s`` (so it may start up to one sampling interval
    early); with none that early, the whole run counts.
    """
    start = end_s - window_s
    before = [cpu for t, cpu in samples if t <= start]
    return total_s - (before[-1] if before else 0.0)


# -- statistics ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class RatioSummary:
    """Geometric mean of paired ratios and its interval (t on the log ratios); None below 2 pairs."""

    count: int
    geometric_mean: float
    low: float | None
    high: float | None
    log_sd: float | None
    confidence: float

    def describe(self) -> str:
        if self.low is None:
            return f"{self.geometric_mean:.4f} ({self.count} pair, no interval)"
        return (
            f"{self.geometric_mean:.4f} ({self.confidence:.0%} interval {self.low:.4f} to {self.high:.4f}; "
            f"{self.count} pairs, SD of the log ratio {self.log_sd:.4f})"
        )


def ratio_summary(ratios: Sequence[float], *, confidence: float = 0.95) -> RatioSummary:
    if not ratios or any(not r > 0 for r in ratios):
        raise ValueError(f"ratio_summary needs positive ratios, not {list(ratios)}")
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return RatioSummary(
            count=1, geometric_mean=math.exp(mean), low=None, high=None, log_sd=None, confidence=confidence
        )
    sd = statistics.stdev(logs)
    half = t_quantile(0.5 + confidence / 2.0, len(logs) - 1) * sd / math.sqrt(len(logs))
    return RatioSummary(
        count=len(logs),
        geometric_mean=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        log_sd=sd,
        confidence=confidence,
    )


def round_order(index: int, sides: tuple[str, ...] = ("harness", "ours")) -> tuple[str, ...]:
    """The order of round ``index``: ``sides`` turned by ``index`` places.

    With two sides the harness goes first in even rounds and ours in odd ones; with
    three, each side takes each place once in every three rounds.
    """
    turn = index % len(sides)
    return tuple(sides[turn:]) + tuple(sides[:turn])


def relative_speed_by_request(runs: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each request's time per token over that request's median across ``runs``.

    Every run sends the same prompts in the same order, so position i is one prompt in
    every run, and the ratio removes what the prompt itself costs (its length, how many
    drafted tokens it accepts): what is left is the server's speed at the time. A run of
    values near 1.4 among values near 1.0 is the server in a slower state for a while,
    whichever client drove it.
    """
    if not runs or len({len(run) for run in runs}) != 1:
        raise ValueError("the runs must have the same number of requests, in the same order")
    medians = [statistics.median(run[i] for run in runs) for i in range(len(runs[0]))]
    return [[value / median for value, median in zip(run, medians)] for run in runs]


def pairs_for_interval(sd_log_ratio: float, half_width: float, *, confidence: float = 0.95) -> int:
    """The pairs a geometric-mean ratio needs for its interval to lie within 1 +- ``half_width``."""
    target = math.log1p(half_width)
    for pairs in range(2, 100_000):
        if t_quantile(0.5 + confidence / 2, pairs - 1) * sd_log_ratio / math.sqrt(pairs) <= target:
            return pairs
    raise ValueError(f"no sample size under 100000 pairs for SD {sd_log_ratio} and +-{half_width}")
