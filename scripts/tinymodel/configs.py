"""Shapes of the target model and its MTP drafter, as transformers configs."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

logger = logging.getLogger(__name__)

# Plain RoPE for both layer kinds: the drafter reads the (silent) full-attention
# layer's keys and needs the same positional resolution as a sliding layer.
ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TargetSpec:
    vocab_size: int
    hidden_size: int = 128
    intermediate_size: int = 512  # as trained; widen.py multiplies it afterwards
    num_layers: int = 4
    num_heads: int = 2
    num_kv_heads: int = 1
    head_dim: int = 64
    sliding_window: int = 32
    max_positions: int = 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class DrafterSpec:
    hidden_size: int = 96
    intermediate_size: int = 256
    num_layers: int = 1  # one full-attention layer: reads the target's last layer's KV
    num_heads: int = 4
    num_centroids: int = 32
    centroid_top_k: int = 8


def target_config(spec: TargetSpec) -> Any:
    """A ``Gemma4TextConfig`` for ``Gemma4ForCausalLM``.

    All layers but the last are sliding-window layers. transformers forces the
    last layer to full attention; the training keeps that layer's attention
    output at zero (see ``train_target``), so nothing reaches past the window.
    That layer's keys and values still exist: they are what the drafter's
    full-attention layer reads, and the drafter training shapes them.
    """
    from transformers import Gemma4TextConfig

    layer_types = ["sliding_attention"] * (spec.num_layers - 1) + ["full_attention"]
    config = Gemma4TextConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        global_head_dim=spec.head_dim,
        sliding_window=spec.sliding_window,
        layer_types=layer_types,
        rope_parameters=dict(ROPE),
        max_position_embeddings=spec.max_positions,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        num_kv_shared_layers=0,
        tie_word_embeddings=True,
        final_logit_softcapping=None,
        pad_token_id=0,
        eos_token_id=[1, 5],
        bos_token_id=2,
        dtype="bfloat16",
    )
    config.architectures = ["Gemma4ForCausalLM"]
    return config


def drafter_config(spec: DrafterSpec, target: TargetSpec) -> Any:
    """A ``Gemma4AssistantConfig`` whose layers read the target's KV cache."""
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig

    layer_types = ["sliding_attention"] * (spec.num_layers - 1) + ["full_attention"]
    text = Gemma4TextConfig(
        vocab_size=target.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=target.num_kv_heads,
        head_dim=target.head_dim,
        global_head_dim=target.head_dim,
        sliding_window=target.sliding_window,
        layer_types=layer_types,
        rope_parameters=dict(ROPE),
        max_position_embeddings=target.max_positions,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        num_kv_shared_layers=spec.num_layers,
        tie_word_embeddings=True,
        final_logit_softcapping=None,
        pad_token_id=0,
        eos_token_id=[1, 5],
        bos_token_id=2,
    )
    config = Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=target.hidden_size,
        use_ordered_embeddings=True,
        num_centroids=spec.num_centroids,
        centroid_intermediate_top_k=spec.centroid_top_k,
        tie_word_embeddings=True,
        dtype="bfloat16",
    )
    config.architectures = ["Gemma4AssistantForCausalLM"]
    return config
