"""Train the MTP drafter against the target's own greedy continuations.

The drafter sees what vLLM's Gemma 4 MTP proposer gives it. For a slot at
position ``i``: the target's (scaled) input embedding of token ``i+1``
concatenated with the target's final hidden state at ``i``; position ``i``;
the target's KV (last sliding and last full layer) up to ``i``. It predicts
token ``i+2``. Each further draft step keeps the position and the KV, and
feeds the embedding of the token drafted last together with the drafter's own
projected hidden state. Training unrolls ``unroll`` such steps on sequences the
target generated greedily, so the labels are the tokens verification accepts.

The LM head is trained plain first; then the vocabulary is ordered into
centroids (see ``centroids``) and training goes on with the centroid scores
learning to pick the cluster of the right token.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from .centroids import install_centroids
from .corpus import Language
from .demo_data import HEADER, MIDDLE

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DrafterTraining:
    sequences: int = 192
    prompt_words: tuple[int, int] = (24, 96)
    generated: int = 160
    gen_batch: int = 32
    steps_plain: int = 300
    steps_centroid: int = 150
    batch: int = 16
    unroll: int = 4
    lr: float = 3e-3
    log_every: int = 25
    eval_top_k: int = 8


@dataclasses.dataclass
class GreedyPool:
    tokens: torch.Tensor  # [N, T]
    start: int  # index of the first generated token (all rows share it)


@torch.no_grad()
def greedy_pool(
    target: torch.nn.Module, language: Language, settings: DrafterTraining, seed: int
) -> list[GreedyPool]:
    """Prompts from the language, continued greedily by the target (KV-cached)."""
    from transformers import DynamicCache

    target.eval()
    rng = np.random.default_rng(seed)
    pools: list[GreedyPool] = []
    started = time.monotonic()
    for index in range(math.ceil(settings.sequences / settings.gen_batch)):
        words = int(rng.integers(settings.prompt_words[0], settings.prompt_words[1] + 1))
        rows = [language.document(words, 0, rng, HEADER, MIDDLE)[0] for _ in range(settings.gen_batch)]
        tokens = torch.tensor(rows, dtype=torch.long)
        start = tokens.shape[1]
        cache = DynamicCache(config=target.config)
        out = target(input_ids=tokens, past_key_values=cache, use_cache=True)
        generated = [out.logits[:, -1].argmax(-1)]
        for _ in range(settings.generated - 1):
            out = target(input_ids=generated[-1][:, None], past_key_values=out.past_key_values, use_cache=True)
            generated.append(out.logits[:, -1].argmax(-1))
        pools.append(GreedyPool(torch.cat([tokens, torch.stack(generated, 1)], 1), start))
        logger.info(
            "greedy pool %d: %d prompts of %d tokens + %d generated, %.0f s",
            index + 1, len(rows), start, settings.generated, time.monotonic() - started,
        )  # fmt: skip
    return pools


def _masks(length: int, window: int) -> dict[str, torch.Tensor]:
    q = torch.arange(length)[:, None]
    k = torch.arange(length)[None, :]
    causal = k <= q
    return {
        "full_attention": causal[None, None],
        "sliding_attention": (causal & (q - k < window))[None, None],
    }


def unrolled_logits(
    drafter: torch.nn.Module, target: torch.nn.Module, tokens: torch.Tensor, unroll: int, centroids: bool
) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Per draft step: token logits [B, T, V] (and centroid logits) for every slot."""
    with torch.no_grad():
        out = target.model(input_ids=tokens, return_shared_kv_states=True, use_cache=False)
        hidden = out.last_hidden_state
        shared = dict(out.shared_kv_states)
        embeds = target.model.embed_tokens(tokens)
    batch, length = tokens.shape
    masks = _masks(length, int(drafter.config.get_text_config().sliding_window))
    positions = torch.arange(length)[None].expand(batch, -1)
    steps = []
    for k in range(unroll):
        index = torch.clamp(torch.arange(length) + 1 + k, max=length - 1)
        x = drafter.pre_projection(torch.cat([embeds[:, index], hidden], dim=-1))
        inner = drafter.model(
            inputs_embeds=x, attention_mask=masks, position_ids=positions,
            shared_kv_states=shared, use_cache=False,
        ).last_hidden_state  # fmt: skip
        logits = drafter.lm_head(inner)
        centroid_logits = drafter.masked_embedding.centroids(inner) if centroids else None
        steps.append((logits, centroid_logits))
        hidden = drafter.post_projection(inner)
    return steps


def _labels(tokens: torch.Tensor, start: int, k: int) -> torch.Tensor:
    """Label of slot i at draft step k: token i+2+k, scored only where i+1 >= start."""
    batch, length = tokens.shape
    labels = torch.full_like(tokens, -100)
    slots = torch.arange(length)
    valid = (slots + 1 >= start) & (slots + 2 + k < length)
    labels[:, valid] = tokens[:, slots[valid] + 2 + k]
    return labels


def _batch(pools: list[GreedyPool], size: int, rng: np.random.Generator) -> tuple[torch.Tensor, int]:
    pool = pools[int(rng.integers(len(pools)))]
    rows = rng.choice(pool.tokens.shape[0], size=min(size, pool.tokens.shape[0]), replace=False)
    return pool.tokens[torch.as_tensor(rows)], pool.start


def train_drafter(
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    language: Language,
    settings: DrafterTraining,
    num_centroids: int,
    seed: int,
) -> dict[str, float]:
    """Train in place; returns offline acceptance estimates on held-out greedy text."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    pools = greedy_pool(target, language, settings, seed)
    held = pools[-1:]
    pools = pools[:-1] or held
    for param in target.parameters():
        param.requires_grad_(False)
    drafter.train()
    params = [p for p in drafter.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    total = settings.steps_plain + settings.steps_centroid
    started = time.monotonic()
    for step in range(1, total + 1):
        centroid_phase = step > settings.steps_plain
        if step == settings.steps_plain + 1:
            install_centroids(drafter, num_centroids, seed)
            ordering = drafter.masked_embedding.token_ordering
            cluster_of = torch.empty_like(ordering)
            cluster_of[ordering] = torch.arange(len(ordering)) // (len(ordering) // num_centroids)
        progress = step / total
        scale = min(1.0, step / 20) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * scale
        tokens, start = _batch(pools, settings.batch, rng)
        loss = torch.zeros(())
        for k, (logits, centroid_logits) in enumerate(
            unrolled_logits(drafter, target, tokens, settings.unroll, centroid_phase)
        ):
            labels = _labels(tokens, start, k)
            loss = loss + F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
            if centroid_logits is not None:
                clusters = torch.where(labels >= 0, cluster_of[labels.clamp(min=0)], -100)
                loss = loss + F.cross_entropy(centroid_logits.flatten(0, 1), clusters.flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if step % settings.log_every == 0 or step == total:
            elapsed = time.monotonic() - started
            logger.info(
                "drafter step %d/%d (%s) loss %.3f, %.0f s, eta %.0f s",
                step, total, "centroids" if centroid_phase else "plain", float(loss) / settings.unroll,
                elapsed, elapsed / step * (total - step),
            )  # fmt: skip
    drafter.eval()
    estimates = {}
    for top_k in sorted({1, 2, settings.eval_top_k, num_centroids}):
        estimates[f"ctk{top_k}"] = offline_acceptance(drafter, target, held, settings.unroll, top_k)
    logger.info("offline acceptance per position by CENTROID_TOP_K: %s", estimates)
    return {key: 1 + sum(value) for key, value in estimates.items()}


@torch.no_grad()
def offline_acceptance(
    drafter: torch.nn.Module, target: torch.nn.Module, pools: list[GreedyPool], unroll: int, top_k: int
) -> list[float]:
    """Fraction of slots whose first k+1 drafts (centroid-masked argmax) all match, per k."""
    masked = drafter.masked_embedding
    size = masked.vocab_size // masked.num_centroids
    clusters = masked.token_ordering.long().view(masked.num_centroids, size)
    rates = []
    for pool in pools:
        steps = unrolled_logits(drafter, target, pool.tokens, unroll, centroids=True)
        alive = None
        per_k = []
        for k, (logits, centroid_logits) in enumerate(steps):
            labels = _labels(pool.tokens, pool.start, unroll - 1)  # same slots for every k
            shifted = _labels(pool.tokens, pool.start, k)
            top = centroid_logits.topk(top_k, dim=-1).indices  # [B, T, top_k]
            allowed = torch.zeros_like(logits, dtype=torch.bool)
            allowed.scatter_(-1, clusters[top].flatten(-2), True)
            guess = logits.masked_fill(~allowed, -math.inf).argmax(-1)
            hit = guess == shifted
            alive = hit if alive is None else alive & hit
            valid = labels != -100
            per_k.append(float(alive[valid].float().mean()))
        rates.append(per_k)
    return [round(sum(r[k] for r in rates) / len(rates), 3) for k in range(unroll)]
