"""What every evaluator shares: the HTTP client, request helpers, progress callbacks.

Evaluators talk to an OpenAI-compatible server (vLLM) over plain HTTP with
``httpx``. A request that fails becomes a ``MeasurementError`` saying what was
asked of which URL and what the server answered.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeGuard

import httpx

from evaluators.errors import MeasurementError

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0


class ProgressCallback(Protocol):
    """Called as ``progress(phase, done, total)`` after each unit of work of a phase."""

    def __call__(self, phase: str, done: int, total: int) -> None: ...


def report(progress: ProgressCallback | None, phase: str, done: int, total: int) -> None:
    """Call ``progress`` if there is one; a failing callback never fails a measurement."""
    if progress is None:
        return
    try:
        progress(phase, done, total)
    except Exception:  # noqa: BLE001 - display problems must not cost a measurement
        logger.exception("progress callback failed for phase %r", phase)


def make_client(base_url: str, timeout_s: float = DEFAULT_TIMEOUT_S, *, keep_alive: bool = True) -> httpx.Client:
    """A client for one server; the caller closes it.

    ``keep_alive`` False: no idle connection is kept, so every request opens
    a connection of its own and it is closed once the answer is read.
    """
    options: dict[str, Any] = {} if keep_alive else {"limits": httpx.Limits(max_keepalive_connections=0)}
    return httpx.Client(
        base_url=base_url.rstrip("/"),
        timeout=httpx.Timeout(timeout_s, connect=10.0),
        headers={"Content-Type": "application/json"},
        **options,  # keep-alive: httpx's own limits
    )


def error_message(response: httpx.Response) -> str:
    """The server's own error text, as short as it can be had."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:500]
        return str(error)[:500]
    return str(body)[:500]


def post_json(
    client: httpx.Client,
    path: str,
    payload: Mapping[str, Any],
    *,
    what: str,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """POST ``payload``; return the JSON object or raise MeasurementError naming ``what``.

    ``timeout_s``: this request's read timeout (default: the client's).
    """
    url = f"{client.base_url}{path}"
    extra: dict[str, Any] = {}
    if timeout_s is not None:
        extra["timeout"] = httpx.Timeout(timeout_s, connect=10.0)
    try:
        response = client.post(path, json=payload, **extra)
    except httpx.TimeoutException as exc:
        raise MeasurementError(f"{what}: timed out, no answer from {url} in time ({exc})", kind="timeout") from exc
    except httpx.HTTPError as exc:
        raise MeasurementError(f"{what}: request to {url} failed ({exc})") from exc
    if response.status_code != 200:
        raise MeasurementError(f"{what}: {url} answered {response.status_code}: {error_message(response)}")
    try:
        body = response.json()
    except ValueError as exc:
        raise MeasurementError(f"{what}: {url} answered with invalid JSON") from exc
    if not isinstance(body, dict):
        raise MeasurementError(f"{what}: {url} answered with {type(body).__name__}, not an object")
    return body


def chat_payload(
    model: str,
    prompt: str,
    *,
    max_tokens: int,
    temperature: float = 0.0,
    ignore_eos: bool = True,
    stream: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A chat-completions request with one user turn, as the challenge's client sends it."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": stream,
    }
    if ignore_eos:
        payload["ignore_eos"] = True
    if extra:
        payload.update(extra)
    return payload


def served_models(base_url: str, *, timeout_s: float = 30.0) -> dict[str, int | None]:
    """``GET /v1/models``: served model name -> its ``max_model_len`` (None if not given)."""
    url = f"{base_url.rstrip('/')}/v1/models"
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise MeasurementError(f"listing models: request to {url} failed ({exc})") from exc
    if response.status_code != 200:
        raise MeasurementError(f"listing models: {url} answered {response.status_code}")
    models: dict[str, int | None] = {}
    for card in response.json().get("data", []):
        length = card.get("max_model_len")
        models[str(card.get("id"))] = int(length) if isinstance(length, int) else None
    return models


def is_int_list(value: Any) -> TypeGuard[Sequence[int]]:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and all(isinstance(item, int) and not isinstance(item, bool) for item in value)
    )


def finite_or_none(value: float | None) -> float | None:
    """JSON has no infinity: non-finite numbers are written as null by ``to_dict``."""
    if value is None or not math.isfinite(value):
        return None
    return value


TokenCounter = Callable[[str], int]
