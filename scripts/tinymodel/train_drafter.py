"""Train the MTP drafter against the target's own greedy continuations.

The drafter sees what vLLM's Gemma 4 MTP proposer gives it. For a slot at
position ``i``: the target's (scaled) input embedding of token ``i+1``
concatenated with the target's final hidden state at ``i``; position ``i``;
the target's KV (last sliding and last full layer) up to ``i``. It predicts
token ``i+2``. Each further draft step keeps the position and the KV, and
feeds the embedding of the token drafted last together with the drafter's own
projected hidden state. Training unrolls ``unroll`` such steps on sequences the
target generated greedily, so the labels are the tokens verification accepts.

The drafter's full-attention layer reads the keys and values of the target's
last layer, whose attention output the target training keeps at zero; those
key/value projections therefore only serve the drafter and train along with
it (the target's outputs do not change). The LM head is trained plain; afterwards the vocabulary is ordered into
centroids (see ``centroids``), each the mean of its tokens' LM-head rows.
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
    sequences: int = 160
    prompt_words: tuple[int, int] = (24, 96)
    generated: int = 128
    gen_batch: int = 32
    steps: int = 300
    batch: int = 16
    unroll: int = 4
    lr: float = 3e-3
    log_every: int = 25
    eval_top_ks: tuple[int, ...] = (1, 2, 4, 8)


@dataclasses.dataclass
class GreedyPool:
    """Greedy continuations and the target's states on them (cropped to the useful part)."""

    tokens: torch.Tensor  # [N, T]
    start: int  # index of the first generated token (all rows share it)
    offset: int  # position of column 0 in the uncropped text
    hidden: torch.Tensor  # [N, T, H] the target's final (normed) hidden states
    embeds: torch.Tensor  # [N, T, H] the target's scaled input embeddings
    sliding_kv: tuple[torch.Tensor, torch.Tensor]  # last sliding layer's K and V, [N, kv, T, d]
    export_inputs: torch.Tensor  # [N, T, H] the (normed) input of the silent full-attention layer

    def rows(self, index: torch.Tensor) -> GreedyPool:
        return GreedyPool(
            tokens=self.tokens[index], start=self.start, offset=self.offset, hidden=self.hidden[index],
            embeds=self.embeds[index], sliding_kv=(self.sliding_kv[0][index], self.sliding_kv[1][index]),
            export_inputs=self.export_inputs[index],
        )  # fmt: skip


def silent_layer(target: torch.nn.Module) -> torch.nn.Module:
    """The attention module of the target's (silenced) last, full-attention layer."""
    if target.config.layer_types[-1] != "full_attention":
        raise ValueError("the target's last layer is expected to be the full-attention one")
    return target.model.layers[-1].self_attn


def exported_kv(
    target: torch.nn.Module, inputs: torch.Tensor, offset: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of the silent layer for ``inputs``, as its forward computes them."""
    from transformers.models.gemma4.modeling_gemma4 import apply_rotary_pos_emb

    attn = silent_layer(target)
    batch, length, _ = inputs.shape
    positions = (torch.arange(length) + offset)[None].expand(batch, -1)
    cos, sin = target.model.rotary_emb(inputs, positions, "full_attention")
    keys = attn.k_norm(attn.k_proj(inputs).view(batch, length, -1, attn.head_dim))
    keys = apply_rotary_pos_emb(keys, cos, sin, unsqueeze_dim=2).transpose(1, 2)
    values = attn.v_norm(attn.v_proj(inputs).view(batch, length, -1, attn.head_dim)).transpose(1, 2)
    return keys, values


@torch.no_grad()
def greedy_pool(
    target: torch.nn.Module, language: Language, settings: DrafterTraining, keep_before: int, seed: int
) -> list[GreedyPool]:
    """Prompts from the language, continued greedily by the target (KV-cached).

    Each pool keeps the target's states on the whole text, cropped to
    ``keep_before`` prompt tokens before the first generated one (the drafter's
    window reaches no further).
    """
    from transformers import DynamicCache

    target.eval()
    rng = np.random.default_rng(seed)
    pools: list[GreedyPool] = []
    started = time.monotonic()
    for index in range(math.ceil(settings.sequences / settings.gen_batch)):
        words = int(rng.integers(settings.prompt_words[0], settings.prompt_words[1] + 1))
        rows = [language.document(words, 0, rng, HEADER, MIDDLE)[0] for _ in range(settings.gen_batch)]
        tokens = torch.tensor(rows, dtype=torch.long)
        out = target(input_ids=tokens, past_key_values=DynamicCache(config=target.config), use_cache=True)
        generated = [out.logits[:, -1].argmax(-1)]
        for _ in range(settings.generated - 1):
            out = target(input_ids=generated[-1][:, None], past_key_values=out.past_key_values, use_cache=True)
            generated.append(out.logits[:, -1].argmax(-1))
        full = torch.cat([tokens, torch.stack(generated, 1)], 1)
        captured: list[torch.Tensor] = []
        hook = silent_layer(target).register_forward_pre_hook(
            lambda _m, args, kwargs: captured.append(args[0] if args else kwargs["hidden_states"]),
            with_kwargs=True,
        )
        try:
            states = target.model(input_ids=full, return_shared_kv_states=True, use_cache=False)
        finally:
            hook.remove()
        crop = max(0, tokens.shape[1] - keep_before)
        keys, values = states.shared_kv_states["sliding_attention"]
        pools.append(
            GreedyPool(
                tokens=full[:, crop:], start=tokens.shape[1] - crop, offset=crop,
                hidden=states.last_hidden_state[:, crop:], embeds=target.model.embed_tokens(full)[:, crop:],
                sliding_kv=(keys[:, :, crop:], values[:, :, crop:]), export_inputs=captured[-1][:, crop:],
            )
        )  # fmt: skip
        logger.info(
            "greedy pool %d: %d prompts of %d tokens + %d generated, %.0f s",
            index + 1, len(rows), tokens.shape[1], settings.generated, time.monotonic() - started,
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


def unrolled_states(
    drafter: torch.nn.Module, target: torch.nn.Module, pool: GreedyPool, unroll: int
) -> list[torch.Tensor]:
    """Per draft step, the drafter's final normed hidden state [B, T, h] for every slot."""
    batch, length = pool.tokens.shape
    shared = {
        "sliding_attention": pool.sliding_kv,
        "full_attention": exported_kv(target, pool.export_inputs, pool.offset),
    }
    masks = _masks(length, int(drafter.config.get_text_config().sliding_window))
    positions = (torch.arange(length) + pool.offset)[None].expand(batch, -1)
    hidden = pool.hidden
    steps = []
    for k in range(unroll):
        index = torch.clamp(torch.arange(length) + 1 + k, max=length - 1)
        x = drafter.pre_projection(torch.cat([pool.embeds[:, index], hidden], dim=-1))
        inner = drafter.model(
            inputs_embeds=x, attention_mask=masks, position_ids=positions,
            shared_kv_states=shared, use_cache=False,
        ).last_hidden_state  # fmt: skip
        steps.append(inner)
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


def train_drafter(
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    language: Language,
    settings: DrafterTraining,
    num_centroids: int,
    seed: int,
) -> dict[str, float]:
    """Train in place, then install the centroids; returns offline acceptance lengths."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    for param in target.parameters():
        param.requires_grad_(False)
    keep = 2 * int(target.config.sliding_window)
    pools = greedy_pool(target, language, settings, keep, seed)
    held = pools[-1:]
    pools = pools[:-1] or held
    drafter.train()
    # the silent layer's K/V projections only feed the drafter: they train with it
    export = silent_layer(target)
    exported = [export.k_proj.weight, export.v_proj.weight, export.k_norm.weight]
    for param in exported:
        param.requires_grad_(True)
    params = [p for p in drafter.parameters() if p.requires_grad] + exported
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    started = time.monotonic()
    for step in range(1, settings.steps + 1):
        progress = step / settings.steps
        scale = min(1.0, step / 20) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * scale
        pool = pools[int(rng.integers(len(pools)))]
        picked = rng.choice(pool.tokens.shape[0], size=min(settings.batch, pool.tokens.shape[0]), replace=False)
        batch = pool.rows(torch.as_tensor(picked))
        loss = torch.zeros(())
        for k, inner in enumerate(unrolled_states(drafter, target, batch, settings.unroll)):
            labels = _labels(batch.tokens, batch.start, k)
            logits = drafter.lm_head(inner)
            loss = loss + F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if step % settings.log_every == 0 or step == settings.steps:
            elapsed = time.monotonic() - started
            logger.info(
                "drafter step %d/%d loss %.3f per draft step, %.0f s, eta %.0f s",
                step, settings.steps, loss.item() / settings.unroll,
                elapsed, elapsed / step * (settings.steps - step),
            )  # fmt: skip
    drafter.eval()
    for param in exported:
        param.requires_grad_(False)
    install_centroids(drafter, num_centroids, seed)
    estimates = {"plain": offline_acceptance(drafter, target, held, settings.unroll, None)}
    for top_k in settings.eval_top_ks:
        estimates[f"ctk{top_k}"] = offline_acceptance(drafter, target, held, settings.unroll, top_k)
    for key, rates in estimates.items():
        logger.info("offline acceptance per position, %s: %s (length at K=3: %.2f)", key, rates, 1 + sum(rates[:3]))
    return {key: round(1 + sum(rates[:3]), 3) for key, rates in estimates.items()}


@torch.no_grad()
def offline_acceptance(
    drafter: torch.nn.Module, target: torch.nn.Module, pools: list[GreedyPool], unroll: int, top_k: int | None
) -> list[float]:
    """Per draft position, the fraction of slots whose drafts up to it all match the target.

    Drafts are the argmax of the drafter's logits, restricted to the tokens of
    the ``top_k`` best centroids (no restriction for ``None``).
    """
    masked = drafter.masked_embedding
    clusters = masked.token_ordering.long().view(masked.num_centroids, -1)
    hits, total = [0.0] * unroll, 0
    for pool in pools:
        alive = None
        valid = _labels(pool.tokens, pool.start, unroll - 1) != -100  # same slots for every k
        for k, inner in enumerate(unrolled_states(drafter, target, pool, unroll)):
            logits = drafter.lm_head(inner)
            if top_k is not None:
                top = masked.centroids(inner).topk(top_k, dim=-1).indices
                allowed = torch.zeros_like(logits, dtype=torch.bool)
                allowed.scatter_(-1, clusters[top].flatten(-2), True)
                logits = logits.masked_fill(~allowed, -math.inf)
            hit = logits.argmax(-1) == _labels(pool.tokens, pool.start, k)
            alive = hit if alive is None else alive & hit
            hits[k] += float(alive[valid].sum())
        total += int(valid.sum())
    return [round(h / max(total, 1), 3) for h in hits]
