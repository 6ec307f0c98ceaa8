"""TPS as the challenge measures it: single stream, fixed output length, wall clock.

Chat completions with the first human turn of each prompt, one request at a
time, ``max_tokens=output_len`` with ``ignore_eos``, greedy, non-streaming.
TPS is the sum of the output tokens the server reports in ``usage`` divided
by the wall-clock duration of the measured requests (prefill and HTTP time
included).

By default the requests are the ones the challenge harness's client
(``sglang.bench_serving`` 0.5.2, ``--seed 1 --warmup-requests 4``) sends:
the prompts in its seeded shuffle (so a subset is the subset it would
measure), and a warm-up of ``warmup_requests`` requests sent together, each
the first measured prompt with at most ``warmup_output_len`` (32) tokens,
followed by a pause of ``warmup_pause_s`` (1 s) before the timer starts.

A request that fails, or returns fewer tokens than asked for, is kept as a
failed ``RequestRecord``; the result then has ``completed < total`` and
``tps`` is None: a failed measurement never produces a number.

Each request has a timeout that scales with the output length
(``TpsSettings.request_timeout_s``: a base plus seconds per output token),
and the run stops at the first request that times out or cannot reach the
server: the rest are recorded as not sent, so a hung server costs one
request timeout, not one per prompt.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from evaluators._common import (
    ProgressCallback,
    chat_payload,
    error_message,
    make_client,
    report,
)
from evaluators.errors import MeasurementError
from evaluators.prompts import Prompt, PromptSet
from evaluators.spec_metrics import (
    SpecDecodeStats,
    scrape_spec_decode,
    spec_decode_delta,
)

logger = logging.getLogger(__name__)

WARMUP_STYLES = ("harness", "sequential")
ORDERS = ("harness", "given")
CONNECTIONS = ("harness", "keep-alive")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpsSettings:
    """The benchmark's settings; the defaults are the challenge's.

    ``warmup``: ``"harness"`` (``warmup_requests`` concurrent copies of the
    first measured prompt at ``min(output_len, warmup_output_len)`` tokens,
    then ``warmup_pause_s``) or ``"sequential"`` (the first prompts one by
    one at ``output_len``, no pause). ``order``: ``"harness"`` (the set
    shuffled by ``random.Random(seed)``, as the harness's sampler does with
    ``random.seed(seed)``, then the first ``num_prompts``) or ``"given"``.
    ``connection``: ``"harness"`` (each request on a connection of its own,
    closed after its answer, as the harness's client opens a session per
    request) or ``"keep-alive"`` (one connection for the whole run).

    A request may take ``timeout_base_s + timeout_per_token_s * output_len``
    seconds (``request_timeout_s``; 81 s at 512 tokens: a server slower than
    10 tokens/s is treated as hung); ``timeout_s`` overrides that figure.
    """

    num_prompts: int = 128
    output_len: int = 512
    warmup_requests: int = 4
    warmup: str = "harness"
    warmup_output_len: int = 32
    warmup_pause_s: float = 1.0
    order: str = "harness"
    connection: str = "harness"
    seed: int = 1
    ignore_eos: bool = True
    temperature: float = 0.0
    stream: bool = False
    timeout_s: float | None = None
    timeout_base_s: float = 30.0
    timeout_per_token_s: float = 0.1

    @property
    def request_timeout_s(self) -> float:
        """Seconds one request may take before it counts as hung."""
        if self.timeout_s is not None:
            return float(self.timeout_s)
        return self.timeout_base_s + self.timeout_per_token_s * self.output_len

    def __post_init__(self) -> None:
        for field in ("timeout_base_s", "timeout_per_token_s", "warmup_pause_s"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"TpsSettings.{field} must be a non-negative number, not {value!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"TpsSettings.timeout_s must be positive, not {self.timeout_s!r}")
        if not self.request_timeout_s > 0:
            raise ValueError("TpsSettings: the request timeout must be positive")
        if self.warmup not in WARMUP_STYLES:
            raise ValueError(f"TpsSettings.warmup must be one of {WARMUP_STYLES}, not {self.warmup!r}")
        if self.order not in ORDERS:
            raise ValueError(f"TpsSettings.order must be one of {ORDERS}, not {self.order!r}")
        if self.connection not in CONNECTIONS:
            raise ValueError(f"TpsSettings.connection must be one of {CONNECTIONS}, not {self.connection!r}")
        for field in ("num_prompts", "output_len", "warmup_requests", "warmup_output_len", "seed"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TpsSettings.{field} must be a non-negative integer, not {value!r}")
        if self.num_prompts < 1 or self.output_len < 1 or self.warmup_output_len < 1:
            raise ValueError("TpsSettings.num_prompts, output_len and warmup_output_len must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "request_timeout_s": self.request_timeout_s}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestRecord:
    """One measured request. ``ttft_s``/``itl_s`` are set in streaming mode only."""

    index: int
    prompt_id: str
    ok: bool
    output_tokens: int = 0
    prompt_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    error: str | None = None
    ttft_s: float | None = None
    itl_s: float | None = None
    max_tokens_per_chunk: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpsResult:
    """The measurement; ``tps`` is None unless every request completed in full."""

    settings: TpsSettings
    tps: float | None
    completed: int
    total: int
    output_tokens: int
    duration_s: float
    requests: tuple[RequestRecord, ...]
    spec_decode: SpecDecodeStats | None = None
    warmup_duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.completed == self.total and self.total > 0

    @property
    def failures(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.requests if not r.ok)

    @property
    def first_error(self) -> str | None:
        """``request N (prompt id): error`` of the first failed request, if any."""
        first = next(iter(self.failures), None)
        return f"request {first.index} ({first.prompt_id}): {first.error}" if first else None

    def latency_summary(self) -> dict[str, float | None]:
        done = [r for r in self.requests if r.ok]
        return {
            "mean_latency_s": _mean([r.latency_s for r in done]),
            "median_latency_s": _median([r.latency_s for r in done]),
            "mean_ttft_s": _mean([r.ttft_s for r in done if r.ttft_s is not None]),
            "mean_itl_s": _mean([r.itl_s for r in done if r.itl_s is not None]),
        }

    def raise_for_failures(self) -> None:
        """MeasurementError describing the failed requests, if there are any."""
        if self.ok:
            return
        detail = f"; first: {self.first_error}" if self.first_error else ""
        raise MeasurementError(f"TPS measurement failed: {self.completed}/{self.total} completed{detail}")

    def to_dict(self, *, requests: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tps": self.tps,
            "completed": self.completed,
            "total": self.total,
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            "warmup_duration_s": self.warmup_duration_s,
            "settings": self.settings.to_dict(),
            **self.latency_summary(),
            "failures": [r.to_dict() for r in self.failures],
            "spec_decode": self.spec_decode.to_dict() if self.spec_decode else None,
        }
        if requests:
            data["requests"] = [r.to_dict() for r in self.requests]
        return data


def _mean(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.fmean(clean) if clean else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def measure_tps(
    base_url: str,
    model: str,
    prompts: Sequence[Prompt] | PromptSet,
    settings: TpsSettings | None = None,
    *,
    spec_metrics: bool = True,
    progress: ProgressCallback | None = None,
) -> TpsResult:
    """Run the benchmark on ``num_prompts`` prompts against a ready server.

    The prompts and their order come from ``select_prompts``; the warm-up
    (see ``TpsSettings``) is not timed.
    With ``spec_metrics``, ``/metrics`` is scraped right before and after the
    measured requests and the acceptance between the two is attached.
    """
    settings = settings or TpsSettings()
    chosen = select_prompts(prompts, settings)
    if not chosen:
        raise MeasurementError("TPS measurement: the prompt set is empty")
    if len(chosen) < settings.num_prompts:
        logger.info("the prompt set has %d prompts; measuring all of them", len(chosen))
    keep_alive = settings.connection == "keep-alive"
    with make_client(base_url, settings.request_timeout_s, keep_alive=keep_alive) as client:
        warm_began = time.perf_counter()
        _warm_up(client, model, chosen, settings, progress)
        warmup_duration = time.perf_counter() - warm_began

        before = scrape_spec_decode(base_url, client=client) if spec_metrics else None
        records: list[RequestRecord] = []
        began = time.perf_counter()
        unreachable: str | None = None
        for index, prompt in enumerate(chosen):
            if unreachable is not None:
                records.append(RequestRecord(index=index, prompt_id=prompt.id, ok=False, error=unreachable))
                continue
            record = _send(client, model, prompt, index, settings)
            records.append(record)
            if record.error and record.error.startswith(("server unreachable", "timed out")):
                # a hung or dead server: the next request would wait as long again
                unreachable = f"not sent: {record.error} (at request {index})"
                logger.warning("TPS stopped at request %d: %s", index, record.error)
            report(progress, "tps", index + 1, len(chosen))
        duration = time.perf_counter() - began
        after = scrape_spec_decode(base_url, client=client) if spec_metrics and not unreachable else None

    completed = sum(1 for r in records if r.ok)
    output_tokens = sum(r.output_tokens for r in records if r.ok)
    ok = completed == len(records)
    result = TpsResult(
        settings=settings,
        tps=output_tokens / duration if ok and duration > 0 else None,
        completed=completed,
        total=len(records),
        output_tokens=output_tokens,
        duration_s=duration,
        requests=tuple(records),
        spec_decode=spec_decode_delta(before, after),
        warmup_duration_s=warmup_duration,
    )
    if ok:
        logger.info(
            "TPS %.2f: %d tokens in %.2f s (%d/%d)",
            result.tps,
            output_tokens,
            duration,
            completed,
            len(records),
        )
    else:
        logger.warning("TPS measurement failed: %d/%d completed", completed, len(records))
    return result


def select_prompts(prompts: Sequence[Prompt] | PromptSet, settings: TpsSettings) -> list[Prompt]:
    """The prompts measured, in the order they are sent.

    ``order="harness"``: the whole set shuffled by Python's ``random`` seeded
    with ``seed`` (what the harness's ShareGPT sampler does before it takes
    the first ``num_prompts``), then the first ``num_prompts``;
    ``order="given"``: the first ``num_prompts`` as given.
    """
    listed = list(prompts)
    if settings.order == "harness":
        random.Random(settings.seed).shuffle(listed)
    return listed[: settings.num_prompts]


def _warm_up(
    client: httpx.Client,
    model: str,
    chosen: Sequence[Prompt],
    settings: TpsSettings,
    progress: ProgressCallback | None,
) -> None:
    """The untimed requests before the timer starts (see ``TpsSettings``)."""
    count = settings.warmup_requests
    if count == 0:
        return
    if settings.warmup == "harness":
        # all at once, the first measured prompt, a short output, then a pause
        first = chosen[0]
        max_tokens = min(settings.output_len, settings.warmup_output_len)
        with ThreadPoolExecutor(max_workers=count) as pool:
            records = list(
                pool.map(
                    lambda index: _send(client, model, first, index, settings, max_tokens=max_tokens),
                    range(count),
                )
            )
        failed = [r for r in records if not r.ok]
        if failed:
            raise MeasurementError(
                f"TPS warm-up: {len(failed)} of {count} concurrent requests ({first.id}) failed; "
                f"first: {failed[0].error}"
            )
        report(progress, "tps warm-up", count, count)
        time.sleep(settings.warmup_pause_s)
        return
    for index in range(count):
        prompt = chosen[index % len(chosen)]
        record = _send(client, model, prompt, index, settings)
        if not record.ok:
            raise MeasurementError(f"TPS warm-up request {index + 1} ({prompt.id}) failed: {record.error}")
        report(progress, "tps warm-up", index + 1, count)


def _send(
    client: httpx.Client,
    model: str,
    prompt: Prompt,
    index: int,
    settings: TpsSettings,
    *,
    max_tokens: int | None = None,
) -> RequestRecord:
    wanted = settings.output_len if max_tokens is None else max_tokens
    payload = chat_payload(
        model,
        prompt.text,
        max_tokens=wanted,
        temperature=settings.temperature,
        ignore_eos=settings.ignore_eos,
        stream=settings.stream,
    )
    if settings.stream:
        payload["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    began = time.perf_counter()
    try:
        if settings.stream:
            fields = _streamed(client, payload, began)
        else:
            fields = _unary(client, payload)
    except httpx.TimeoutException as exc:
        fields = {"error": f"timed out after {settings.request_timeout_s:.0f} s ({exc})"}
    except httpx.TransportError as exc:
        fields = {"error": f"server unreachable ({exc})"}
    except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError) as exc:
        fields = {"error": f"bad answer ({type(exc).__name__}: {exc})"}
    latency = time.perf_counter() - began
    error = fields.pop("error", None)
    tokens = int(fields.get("output_tokens", 0))
    if error is None:
        if tokens <= 0:
            error = "no output tokens reported in usage"
        elif settings.ignore_eos and tokens < wanted:
            error = f"truncated: {tokens} of {wanted} tokens (finish_reason {fields.get('finish_reason')!r})"
    return RequestRecord(index=index, prompt_id=prompt.id, ok=error is None, latency_s=latency, error=error, **fields)


def _unary(client: httpx.Client, payload: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", json=payload)
    if response.status_code != 200:
        return {"error": f"HTTP {response.status_code}: {error_message(response)}"}
    body = response.json()
    usage = body.get("usage") or {}
    if "completion_tokens" not in usage:
        return {"error": "the answer has no usage.completion_tokens"}
    return {
        "output_tokens": int(usage["completion_tokens"]),
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "finish_reason": body["choices"][0].get("finish_reason"),
    }


def _streamed(client: httpx.Client, payload: dict[str, Any], began: float) -> dict[str, Any]:
    """Stream one request; token counts per chunk come from continuous usage stats.

    A chunk may carry several tokens (speculative decoding emits the accepted
    run at once): the inter-token latency is the time from the first token
    to the last divided by the tokens after the first, not a mean over chunks.
    """
    first_at: float | None = None
    first_count = 0
    last_at = began
    count = 0
    prompt_tokens = 0
    finish_reason = None
    biggest = 0
    with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        if response.status_code != 200:
            response.read()
            return {"error": f"HTTP {response.status_code}: {error_message(response)}"}
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            now = time.perf_counter()
            usage = chunk.get("usage") or {}
            for choice in chunk.get("choices") or []:
                finish_reason = choice.get("finish_reason") or finish_reason
            if "completion_tokens" not in usage:
                continue
            prompt_tokens = int(usage.get("prompt_tokens") or prompt_tokens)
            new_count = int(usage["completion_tokens"])
            if new_count > count:
                biggest = max(biggest, new_count - count)
                if first_at is None:
                    first_at, first_count = now, new_count
                last_at = now
                count = new_count
    if first_at is None:
        return {"error": "the stream carried no tokens (is continuous_usage_stats supported?)"}
    after_first = count - first_count
    return {
        "output_tokens": count,
        "prompt_tokens": prompt_tokens,
        "finish_reason": finish_reason,
        "ttft_s": first_at - began,
        "itl_s": (last_at - first_at) / after_first if after_first > 0 else None,
        "max_tokens_per_chunk": biggest,
    }
