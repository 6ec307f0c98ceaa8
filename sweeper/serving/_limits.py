"""What can be known about a manifest's model before its server starts.

The vocabulary size and max_model_len (from the manifest's env and the model's
config.json) and, for a local tokenizer, a counter of a prompt's tokens through
the chat template: enough to reject bad data before any server time is spent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sweeper.manifest import Manifest

logger = logging.getLogger(__name__)

__all__ = ["ModelLimits", "model_limits"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelLimits:
    """What can be known about the served model before it starts."""

    model: str
    vocab_size: int | None
    max_model_len: int | None

    def chat_token_counter(self) -> Callable[[str], int] | None:
        """Counts a user prompt's tokens through the chat template, if the tokenizer is local."""
        if not Path(self.model).is_dir():
            return None
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - no tokenizer: the check is skipped
            logger.info("prompt lengths not checked up front (no tokenizer: %s)", exc)
            return None

        def count(text: str) -> int:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, Mapping):
                ids = ids["input_ids"]
            return len(ids)

        return count


def model_limits(manifest: Manifest, overrides: Mapping[str, str] | None = None) -> ModelLimits:
    """Vocabulary size and max_model_len from the manifest's env and the model's config.json."""
    env = {**manifest.env, **(overrides or {})}
    model = env.get("MODEL_ID") or manifest.model_id
    candidate = Path(model).expanduser()
    if model and not candidate.is_absolute():
        candidate = manifest.folder / candidate
    config: dict[str, Any] = {}
    if candidate.is_dir():
        model = str(candidate.resolve())
        try:
            config = json.loads((candidate / "config.json").read_text())
        except (OSError, json.JSONDecodeError):
            config = {}
    nested = config.get("text_config")
    text_config: dict[str, Any] = nested if isinstance(nested, dict) else {}
    vocab = text_config.get("vocab_size") or config.get("vocab_size")
    max_len: int | None = None
    if env.get("MAX_MODEL_LEN"):
        try:
            max_len = int(env["MAX_MODEL_LEN"])
        except ValueError:
            max_len = None
    if max_len is None:
        max_len = text_config.get("max_position_embeddings") or config.get("max_position_embeddings")
    return ModelLimits(
        model=model,
        vocab_size=int(vocab) if isinstance(vocab, int) else None,
        max_model_len=int(max_len) if isinstance(max_len, int) else None,
    )
