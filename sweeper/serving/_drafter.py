"""CENTROID_TOP_K without touching the user's drafter files.

The Gemma 4 MTP drafter reads ``centroid_intermediate_top_k`` from its
config.json. For another value sweeper builds a sibling folder in its cache
whose config.json differs and whose other files are symbolic links to the
original ones. The folder's name is derived from the drafter's path, its
config and the value, so it is built once, atomically, and reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from sweeper.errors import ManifestError

logger = logging.getLogger(__name__)

TOP_K_FIELD = "centroid_intermediate_top_k"


def cache_root() -> Path:
    base = os.environ.get("SWEEPER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sweeper"
    )
    return Path(base) / "drafters"


def drafter_with_top_k(drafter: str, top_k: int, *, label: str = "<manifest>", check_only: bool = False) -> Path:
    """A drafter folder identical to ``drafter`` but for its centroid top-k.

    ``check_only``: the checks alone (ManifestError for a value the drafter cannot
    take), nothing built; returns the drafter's own folder."""
    source = _local_drafter(drafter, label)
    config_path = source / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(
            label, "env.SPECULATIVE_CONFIG", f"drafter config {config_path} unreadable ({exc})"
        ) from None
    num_centroids = config.get("num_centroids")
    if not config.get("use_ordered_embeddings", False) and TOP_K_FIELD not in config:
        raise ManifestError(label, "env.CENTROID_TOP_K", f"drafter {source} has no centroid masking to configure")
    if top_k <= 0 or (isinstance(num_centroids, int) and top_k > num_centroids):
        raise ManifestError(
            label,
            "env.CENTROID_TOP_K",
            f"must be from 1 to the drafter's num_centroids ({num_centroids}), not {top_k}",
        )
    if check_only or config.get(TOP_K_FIELD) == top_k:
        return source
    config[TOP_K_FIELD] = top_k
    rendered = json.dumps(config, indent=2, sort_keys=True)
    digest = hashlib.sha256(f"{source}\n{rendered}".encode()).hexdigest()[:16]
    target = cache_root() / f"{source.name}-ctk{top_k}-{digest}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for entry in source.iterdir():
            if entry.name == "config.json":
                (staging / "config.json").write_text(rendered + "\n")
            else:
                (staging / entry.name).symlink_to(entry.resolve())
        try:
            staging.rename(target)
        except OSError:  # another process built it first
            if not target.is_dir():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    logger.info("drafter %s with %s=%d at %s", source, TOP_K_FIELD, top_k, target)
    return target


def _local_drafter(drafter: str, label: str) -> Path:
    path = Path(drafter).expanduser()
    if path.is_dir():
        return path.resolve()
    try:  # a hub id already in the local cache
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(drafter, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means "not available locally"
        raise ManifestError(
            label,
            "env.SPECULATIVE_CONFIG",
            f"drafter {drafter!r} is not a local folder (CENTROID_TOP_K needs its files)",
        ) from None
