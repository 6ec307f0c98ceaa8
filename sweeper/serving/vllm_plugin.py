"""sweeper's patches to vLLM, loaded by vLLM in each of its processes.

Registered under the ``vllm.general_plugins`` entry-point group. Every patch
checks whether it is needed, does nothing where it is not, and logs one line
when it is applied. This module must stay importable without vLLM (it is
only imported by vLLM itself, but tests check that it does not fail).
"""

from __future__ import annotations

import logging
from typing import Any

# under "vllm." so that vLLM's own log handler and level apply in its processes
logger = logging.getLogger("vllm.sweeper_patches")

_applied: set[str] = set()


def register() -> None:
    """Entry point called by vLLM's plugin loader."""
    patch_centroid_graphs_on_cpu()


def patch_centroid_graphs_on_cpu() -> bool:
    """Let MTP with centroid masking run where CUDA is not available.

    The Gemma 4 proposer always captures CUDA graphs for its centroid
    top-tokens path, which fails on CPU ("Tried to instantiate dummy base
    class CUDAGraph"). Without the graphs the proposer falls back to the
    drafter's own ``get_top_tokens``, which applies the same centroid mask.
    Returns whether the patch is in place.
    """
    name = "centroid-graphs-cpu"
    if name in _applied:
        return True
    try:
        import torch
        from vllm.v1.spec_decode import gemma4 as gemma4_spec
    except ImportError:
        return False
    if torch.cuda.is_available():
        return False
    proposer = getattr(gemma4_spec, "Gemma4Proposer", None)
    if proposer is None or not hasattr(proposer, "_setup_centroids_cuda_graphs"):
        return False

    def _setup_centroids_without_graphs(self: Any) -> None:
        self._centroids_sizes = []
        logger.info("sweeper patch: no CUDA, centroid top-tokens run without CUDA graphs")

    proposer._setup_centroids_cuda_graphs = _setup_centroids_without_graphs
    _applied.add(name)
    logger.info("sweeper patch applied: %s (Gemma4Proposer centroid path on CPU)", name)
    return True
