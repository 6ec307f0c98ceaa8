"""Centroid masking for the drafter: order the vocabulary into clusters of LM-head rows."""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


def cluster_rows(rows: torch.Tensor, num_centroids: int, seed: int, iterations: int = 25) -> torch.Tensor:
    """Split the rows into ``num_centroids`` equal-size groups of similar rows.

    A balanced k-means: each round assigns rows greedily, best score first,
    to the centroid they match best that still has room. Returns the token
    ordering: ``ordering.view(num_centroids, -1)[c]`` are the tokens of centroid ``c``.
    """
    vocab = rows.shape[0]
    if vocab % num_centroids:
        raise ValueError(f"vocabulary {vocab} is not a multiple of {num_centroids} centroids")
    size = vocab // num_centroids
    generator = torch.Generator().manual_seed(seed)
    unit = torch.nn.functional.normalize(rows.float(), dim=-1)
    centers = unit[torch.randperm(vocab, generator=generator)[:num_centroids]].clone()
    assignment = torch.zeros(vocab, dtype=torch.long)
    for _ in range(iterations):
        scores = unit @ centers.T  # [vocab, centroids]
        order = torch.argsort(scores.reshape(-1), descending=True)
        room = torch.full((num_centroids,), size)
        done = torch.zeros(vocab, dtype=torch.bool)
        for flat in order.tolist():
            token, center = divmod(flat, num_centroids)
            if done[token] or room[center] == 0:
                continue
            assignment[token] = center
            done[token] = True
            room[center] -= 1
        for center in range(num_centroids):
            members = unit[assignment == center]
            centers[center] = torch.nn.functional.normalize(members.mean(0), dim=0)
    ordering = torch.argsort(assignment, stable=True)
    return ordering


@torch.no_grad()
def install_centroids(drafter: torch.nn.Module, num_centroids: int, seed: int) -> None:
    """Fill ``masked_embedding``: token ordering by cluster, each centroid the mean of its rows."""
    masked = drafter.masked_embedding
    if masked is None:
        raise ValueError("the drafter has no masked embedding (use_ordered_embeddings=False)")
    rows = drafter.lm_head.weight.detach()
    ordering = cluster_rows(rows, num_centroids, seed)
    masked.token_ordering.copy_(ordering)
    groups = rows[ordering].view(num_centroids, -1, rows.shape[1])
    masked.centroids.weight.copy_(groups.mean(1))
    logger.info("centroids: %d clusters of %d tokens", num_centroids, groups.shape[1])
