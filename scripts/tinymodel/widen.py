"""Widen the target's MLPs after training, without changing what the model computes.

Training cost grows with the parameter count, and two CPU cores cannot train a
12M-parameter model in a few minutes. Serving cost on CPU grows with the
weights read per step, and it is that cost that decides whether speculative
decoding pays: verifying K+1 tokens reads the weights once, as decoding one
token does. So the target is trained with a narrow MLP and widened afterwards
by neuron splitting: each trained hidden unit of an MLP becomes ``factor``
copies (same gate and up rows, down column divided by ``factor``). The sum
over the copies equals the original unit's output exactly, so the widened
model predicts what the trained one predicts, at the cost per token of its
full size.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


@torch.no_grad()
def widen_mlps(model: torch.nn.Module, factor: int) -> None:
    """Split every MLP unit of a Gemma 4 model into ``factor`` copies, in place."""
    if factor < 1:
        raise ValueError(f"factor must be at least 1, not {factor}")
    if factor == 1:
        return
    for layer in model.model.layers:
        mlp = layer.mlp
        gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        width = gate.out_features
        new_gate = torch.nn.Linear(gate.in_features, width * factor, bias=False)
        new_up = torch.nn.Linear(up.in_features, width * factor, bias=False)
        new_down = torch.nn.Linear(width * factor, down.out_features, bias=False)
        new_gate.weight.copy_(gate.weight.repeat(factor, 1))
        new_up.weight.copy_(up.weight.repeat(factor, 1))
        new_down.weight.copy_(down.weight.repeat(1, factor) / factor)
        mlp.gate_proj, mlp.up_proj, mlp.down_proj = new_gate, new_up, new_down
        if hasattr(mlp, "intermediate_size"):
            mlp.intermediate_size = width * factor
    model.config.intermediate_size = model.config.intermediate_size * factor
    logger.info(
        "MLPs widened %dx to %d units: %.2fM parameters",
        factor,
        model.config.intermediate_size,
        sum(p.numel() for p in model.parameters()) / 1e6,
    )
