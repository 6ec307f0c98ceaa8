"""Train the target model on documents of the synthetic language."""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np
import torch

from .corpus import Language
from .demo_data import HEADER, documents
from .tokenizer import FIRST_WORD_ID
from .train_drafter import drafter_loss, target_states

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TargetTraining:
    steps: int = 300
    batch: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.01
    log_every: int = 25
    drafter_weight: float = 0.5  # weight of the joint drafter (MTP) loss, when a drafter trains along
    unroll: int = 4


def labels_of(tokens: torch.Tensor) -> torch.Tensor:
    """Next-token labels; chat markers are not scored (only words are)."""
    labels = tokens.clone()
    labels[labels < FIRST_WORD_ID] = -100
    return labels


def silence_global_attention(model: torch.nn.Module) -> None:
    """Zero the attention output of every full-attention layer and freeze it.

    transformers forces Gemma 4's last layer to full attention. With its
    output at zero the model only ever sees the sliding window, so cutting the
    window really removes information.
    """
    for layer, kind in zip(model.model.layers, model.config.layer_types, strict=True):
        if kind == "full_attention":
            with torch.no_grad():
                layer.self_attn.o_proj.weight.zero_()
            layer.self_attn.o_proj.weight.requires_grad_(False)


def set_window(model: torch.nn.Module, window: int) -> None:
    """Change the sliding window of a transformers Gemma 4 model in place."""
    model.config.sliding_window = window
    for layer in model.model.layers:
        if layer.self_attn.is_sliding:
            layer.self_attn.sliding_window = window


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    """Mean NLL per scored token over fixed batches."""
    model.eval()
    total, count = 0.0, 0
    for tokens in batches:
        logits = model(input_ids=tokens).logits[:, :-1].float()
        labels = labels_of(tokens)[:, 1:]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
        )
        total += float(loss)
        count += int((labels != -100).sum())
    model.train()
    return total / max(count, 1)


def train_target(
    model: torch.nn.Module,
    language: Language,
    settings: TargetTraining,
    seed: int,
    drafter: torch.nn.Module | None = None,
) -> dict[str, float]:
    """Train in place; returns the held-out PPL at the trained window and at smaller ones.

    With a ``drafter``, it trains along (multi-token prediction): its loss on
    the text's next tokens is added with ``drafter_weight`` and its gradients
    reach the target too, so the target's hidden states and exported KV learn
    to carry what the drafter needs.
    """
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    silence_global_attention(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if drafter is not None:
        drafter.train()
        params += [p for p in drafter.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.lr,
        betas=(0.9, 0.95),
    )
    held_rng = np.random.default_rng(seed + 99)
    held = [documents(language, settings.batch, settings.seq_len, held_rng) for _ in range(2)]
    started = time.monotonic()
    for step in range(1, settings.steps + 1):
        progress = step / settings.steps
        scale = min(1.0, step / settings.warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * scale
        tokens = documents(language, settings.batch, settings.seq_len, rng)
        labels = labels_of(tokens)[:, 1:]
        draft = torch.zeros(())
        if drafter is None:
            logits = model(input_ids=tokens).logits[:, :-1]
        else:
            states = target_states(model, tokens, len(HEADER), grad=True, text_labels=True)
            logits = model.lm_head(states.hidden)[:, :-1]
            draft = drafter_loss(drafter, model, states, settings.unroll)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100
        )
        total = loss + settings.drafter_weight * draft
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if step % settings.log_every == 0 or step == settings.steps:
            elapsed = time.monotonic() - started
            logger.info(
                "target step %d/%d loss %.3f (ppl %.2f) drafter loss %.3f lr %.2e, %.0f s, eta %.0f s",
                step,
                settings.steps,
                loss.item(),
                math.exp(loss.item()),
                draft.item(),
                settings.lr * scale,
                elapsed,
                elapsed / step * (settings.steps - step),
            )
    window = int(model.config.sliding_window)
    result = {f"ppl_w{window}": math.exp(evaluate(model, held))}
    for other in sorted({window // 2, (3 * window) // 4}):
        set_window(model, other)
        result[f"ppl_w{other}"] = math.exp(evaluate(model, held))
    set_window(model, window)
    logger.info("target held-out PPL by window: %s", {k: round(v, 3) for k, v in result.items()})
    return result
