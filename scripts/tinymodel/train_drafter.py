"""Train the MTP drafter to predict what the target predicts.

The drafter sees what vLLM's Gemma 4 MTP proposer gives it. For a slot at
position ``i``: the target's (scaled) input embedding of token ``i+1``
concatenated with the target's final hidden state at ``i``; position ``i``;
the target's KV (last sliding and last full layer) up to ``i``. It predicts
the token after ``i+1``. Each further draft step keeps the position and the
KV, and feeds the embedding of the token drafted last together with the
drafter's own projected hidden state. Training unrolls ``unroll`` such steps.

Labels are the target's argmax at each position, on fresh text of the
language every step (so the drafter learns the rule, not a sample of it).
Acceptance is then estimated on text the target continued greedily, where
the labels are exactly the tokens verification accepts.

The drafter's full-attention layer reads the keys and values of the target's
last layer, whose attention output the target training keeps at zero; those
key/value projections therefore only serve the drafter and train along with
it (the target's outputs do not change). The LM head is trained plain;
afterwards the vocabulary is ordered into centroids (see ``centroids``), each
the mean of its tokens' LM-head rows.
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
from .demo_data import HEADER, MIDDLE, documents
from .tokenizer import FIRST_WORD_ID

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DrafterTraining:
    steps: int = 100
    batch: int = 16
    seq_len: int = 128
    unroll: int = 4
    lr: float = 4e-3
    log_every: int = 25
    eval_sequences: int = 32
    eval_prompt_words: int = 60
    eval_generated: int = 128
    eval_top_ks: tuple[int, ...] = (1, 2, 4, 8)


@dataclasses.dataclass
class TargetStates:
    """A batch of text and what the drafter needs from the target about it."""

    tokens: torch.Tensor  # [B, T]
    predicted: torch.Tensor  # [B, T] the target's argmax at each position
    start: int  # first position whose prediction is scored
    hidden: torch.Tensor  # [B, T, H] the target's final (normed) hidden states
    embeds: torch.Tensor  # [B, T, H] the target's scaled input embeddings
    sliding_kv: tuple[torch.Tensor, torch.Tensor]  # last sliding layer's K and V, [B, kv, T, d]
    export_inputs: torch.Tensor  # [B, T, H] the (normed) input of the silent full-attention layer


def silent_layer(target: torch.nn.Module) -> torch.nn.Module:
    """The attention module of the target's (silenced) last, full-attention layer."""
    if target.config.layer_types[-1] != "full_attention":
        raise ValueError("the target's last layer is expected to be the full-attention one")
    return target.model.layers[-1].self_attn


def target_states(
    target: torch.nn.Module, tokens: torch.Tensor, start: int, *, grad: bool = False, text_labels: bool = False
) -> TargetStates:
    """Run the target on ``tokens``, keeping what the drafter reads.

    The drafter's labels are the target's argmax at each position, or with
    ``text_labels`` the text's own next tokens (chat markers unscored), as in
    training a target together with its multi-token-prediction head.
    """
    captured: list[torch.Tensor] = []
    hook = silent_layer(target).register_forward_pre_hook(
        lambda _m, args, kwargs: captured.append(args[0] if args else kwargs["hidden_states"]),
        with_kwargs=True,
    )
    try:
        with torch.set_grad_enabled(grad):
            states = target.model(input_ids=tokens, return_shared_kv_states=True, use_cache=False)
    finally:
        hook.remove()
    if text_labels:
        predicted = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)
        predicted = predicted.masked_fill((predicted >= 0) & (predicted < FIRST_WORD_ID), -100)
    else:
        with torch.no_grad():
            predicted = target.lm_head(states.last_hidden_state).argmax(-1)
    return TargetStates(
        tokens=tokens,
        predicted=predicted,
        start=start,
        hidden=states.last_hidden_state,
        embeds=target.model.embed_tokens(tokens).detach(),
        sliding_kv=states.shared_kv_states["sliding_attention"],
        export_inputs=captured[-1],
    )


def exported_kv(target: torch.nn.Module, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of the silent layer for ``inputs``, as its forward computes them."""
    from transformers.models.gemma4.modeling_gemma4 import apply_rotary_pos_emb

    attn = silent_layer(target)
    batch, length, _ = inputs.shape
    positions = torch.arange(length)[None].expand(batch, -1)
    cos, sin = target.model.rotary_emb(inputs, positions, "full_attention")
    keys = attn.k_norm(attn.k_proj(inputs).view(batch, length, -1, attn.head_dim))
    keys = apply_rotary_pos_emb(keys, cos, sin, unsqueeze_dim=2).transpose(1, 2)
    values = attn.v_norm(attn.v_proj(inputs).view(batch, length, -1, attn.head_dim)).transpose(1, 2)
    return keys, values


def _masks(length: int, window: int) -> dict[str, torch.Tensor]:
    q = torch.arange(length)[:, None]
    k = torch.arange(length)[None, :]
    causal = k <= q
    return {
        "full_attention": causal[None, None],
        "sliding_attention": (causal & (q - k < window))[None, None],
    }


def unrolled_states(
    drafter: torch.nn.Module, target: torch.nn.Module, states: TargetStates, unroll: int
) -> list[torch.Tensor]:
    """Per draft step, the drafter's final normed hidden state [B, T, h] for every slot."""
    batch, length = states.tokens.shape
    shared = {"sliding_attention": states.sliding_kv, "full_attention": exported_kv(target, states.export_inputs)}
    masks = _masks(length, int(drafter.config.get_text_config().sliding_window))
    positions = torch.arange(length)[None].expand(batch, -1)
    hidden = states.hidden
    steps = []
    for k in range(unroll):
        index = torch.clamp(torch.arange(length) + 1 + k, max=length - 1)
        x = drafter.pre_projection(torch.cat([states.embeds[:, index], hidden], dim=-1))
        inner = drafter.model(
            inputs_embeds=x,
            attention_mask=masks,
            position_ids=positions,
            shared_kv_states=shared,
            use_cache=False,
        ).last_hidden_state
        steps.append(inner)
        hidden = drafter.post_projection(inner)
    return steps


def drafter_loss(drafter: torch.nn.Module, target: torch.nn.Module, states: TargetStates, unroll: int) -> torch.Tensor:
    """Mean over the unrolled draft steps of the cross-entropy against the labels."""
    loss = torch.zeros(())
    for k, inner in enumerate(unrolled_states(drafter, target, states, unroll)):
        labels = labels_at(states, k)
        loss = loss + F.cross_entropy(drafter.lm_head(inner).flatten(0, 1), labels.flatten(), ignore_index=-100)
    return loss / unroll


def labels_at(states: TargetStates, k: int, last: int | None = None) -> torch.Tensor:
    """Label of slot i at draft step k: the target's prediction at i+1+k.

    Scored where i+1 >= start and i+1+``last`` (default k) is inside the text.
    """
    last = k if last is None else last
    length = states.tokens.shape[1]
    labels = torch.full_like(states.tokens, -100)
    slots = torch.arange(length)
    valid = (slots + 1 >= states.start) & (slots + 1 + last < length)
    labels[:, valid] = states.predicted[:, slots[valid] + 1 + k]
    return labels


@torch.no_grad()
def greedy_states(target: torch.nn.Module, language: Language, settings: DrafterTraining, seed: int) -> TargetStates:
    """Prompts of the language continued greedily by the target (KV-cached), with its states."""
    from transformers import DynamicCache

    rng = np.random.default_rng(seed)
    rows = [
        language.document(settings.eval_prompt_words, 0, rng, HEADER, MIDDLE)[0] for _ in range(settings.eval_sequences)
    ]
    tokens = torch.tensor(rows, dtype=torch.long)
    out = target(input_ids=tokens, past_key_values=DynamicCache(config=target.config), use_cache=True)
    generated = [out.logits[:, -1].argmax(-1)]
    for _ in range(settings.eval_generated - 1):
        out = target(input_ids=generated[-1][:, None], past_key_values=out.past_key_values, use_cache=True)
        generated.append(out.logits[:, -1].argmax(-1))
    return target_states(target, torch.cat([tokens, torch.stack(generated, 1)], 1), tokens.shape[1])


def train_drafter(
    drafter: torch.nn.Module,
    target: torch.nn.Module,
    language: Language,
    settings: DrafterTraining,
    num_centroids: int,
    seed: int,
) -> dict[str, float]:
    """Train in place, then install the centroids; returns offline acceptance lengths at K=3."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    target.eval()
    for param in target.parameters():
        param.requires_grad_(False)
    # the silent layer's K/V projections only feed the drafter: they train with it
    export = silent_layer(target)
    exported = [export.k_proj.weight, export.v_proj.weight, export.k_norm.weight]
    for param in exported:
        param.requires_grad_(True)
    drafter.train()
    params = [p for p in drafter.parameters() if p.requires_grad] + exported
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    started = time.monotonic()
    for step in range(1, settings.steps + 1):
        progress = step / settings.steps
        scale = min(1.0, step / 20) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * scale
        tokens = documents(language, settings.batch, settings.seq_len, rng)
        loss = drafter_loss(drafter, target, target_states(target, tokens, len(HEADER)), settings.unroll)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if step % settings.log_every == 0 or step == settings.steps:
            elapsed = time.monotonic() - started
            logger.info(
                "drafter step %d/%d loss %.3f per draft step, %.0f s, eta %.0f s",
                step,
                settings.steps,
                loss.item(),
                elapsed,
                elapsed / step * (settings.steps - step),
            )
    drafter.eval()
    for param in exported:
        param.requires_grad_(False)
    install_centroids(drafter, num_centroids, seed)
    held = greedy_states(target, language, settings, seed + 7)
    estimates = {"plain": offline_acceptance(drafter, target, held, settings.unroll, None)}
    for top_k in settings.eval_top_ks:
        estimates[f"ctk{top_k}"] = offline_acceptance(drafter, target, held, settings.unroll, top_k)
    for key, rates in estimates.items():
        logger.info("offline acceptance per position, %s: %s (length at K=3: %.2f)", key, rates, 1 + sum(rates[:3]))
    return {key: round(1 + sum(rates[:3]), 3) for key, rates in estimates.items()}


@torch.no_grad()
def offline_acceptance(
    drafter: torch.nn.Module, target: torch.nn.Module, states: TargetStates, unroll: int, top_k: int | None
) -> list[float]:
    """Per draft position, the fraction of slots whose drafts up to it all match the target.

    Drafts are the argmax of the drafter's logits, restricted to the tokens of
    the ``top_k`` best centroids (no restriction for ``None``).
    """
    masked = drafter.masked_embedding
    clusters = masked.token_ordering.long().view(masked.num_centroids, -1)
    valid = labels_at(states, 0, last=unroll - 1) != -100  # the same slots for every k
    alive = torch.ones_like(valid)
    rates = []
    for k, inner in enumerate(unrolled_states(drafter, target, states, unroll)):
        logits = drafter.lm_head(inner)
        if top_k is not None:
            top = masked.centroids(inner).topk(top_k, dim=-1).indices
            allowed = torch.zeros_like(logits, dtype=torch.bool)
            allowed.scatter_(-1, clusters[top].flatten(-2), True)
            logits = logits.masked_fill(~allowed, -math.inf)
        alive = alive & (logits.argmax(-1) == labels_at(states, k))
        rates.append(round(float(alive[valid].float().mean()), 3))
    return rates
