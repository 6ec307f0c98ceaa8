"""The demo's prompt sets (ShareGPT JSON), PPL reference records (JSONL) and manifest."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import torch

from sweeper import __version__
from sweeper.versions import DISTRIBUTION

from .corpus import Language
from .tokenizer import BOS_ID, END_TURN_ID, FIRST_WORD_ID, MODEL_ID, START_TURN_ID, USER_ID

logger = logging.getLogger(__name__)

HEADER = [BOS_ID, START_TURN_ID, USER_ID]
MIDDLE = [END_TURN_ID, START_TURN_ID, MODEL_ID]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSpec:
    prompts_tuning: int = 48
    prompts_heldout: int = 16
    ppl_tuning: int = 32
    ppl_heldout: int = 16
    prompt_words: tuple[int, int] = (48, 320)
    ppl_context_words: tuple[int, int] = (24, 160)
    ppl_target_words: tuple[int, int] = (192, 320)
    seed_tuning: int = 101
    seed_heldout: int = 202


def documents(language: Language, batch: int, seq_len: int, rng: np.random.Generator) -> torch.Tensor:
    """``batch`` chat-formatted documents of exactly ``seq_len`` tokens."""
    rows: list[list[int]] = []
    for _ in range(batch):
        prompt = int(rng.integers(4, seq_len - len(HEADER) - len(MIDDLE) - 8))
        response = seq_len - len(HEADER) - len(MIDDLE) - prompt
        tokens, _ = language.document(prompt, response, rng, HEADER, MIDDLE)
        rows.append(tokens[:seq_len])
    return torch.tensor(rows, dtype=torch.long)


def prompt_set(
    language: Language, names: list[str], count: int, seed: int, lengths: tuple[int, int], tag: str
) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for index in range(count):
        size = int(rng.integers(lengths[0], lengths[1] + 1))
        tokens, _ = language.document(size, 0, rng, HEADER, MIDDLE)
        words = tokens[len(HEADER) : len(HEADER) + size]
        text = " ".join(names[t - FIRST_WORD_ID] for t in words)
        out.append({"id": f"{tag}-{index:03d}", "conversations": [{"from": "human", "value": text}]})
    return out


def ppl_records(language: Language, count: int, seed: int, spec: DataSpec, tag: str) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for index in range(count):
        context = int(rng.integers(spec.ppl_context_words[0], spec.ppl_context_words[1] + 1))
        target = int(rng.integers(spec.ppl_target_words[0], spec.ppl_target_words[1] + 1))
        tokens, start = language.document(context, target, rng, HEADER, MIDDLE)
        out.append(
            {
                "id": f"{tag}-{index:03d}",
                "context_token_ids": tokens[:start],
                "target_token_ids": tokens[start:],
            }
        )
    return out


def write_data(language: Language, names: list[str], spec: DataSpec, folder: Path) -> None:
    """Write the four data files into ``folder``."""
    sets = {
        "prompts_tuning.json": prompt_set(
            language, names, spec.prompts_tuning, spec.seed_tuning, spec.prompt_words, "tune"
        ),
        "prompts_heldout.json": prompt_set(
            language, names, spec.prompts_heldout, spec.seed_heldout, spec.prompt_words, "held"
        ),
    }
    for name, prompts in sets.items():
        (folder / name).write_text(json.dumps(prompts, indent=1) + "\n")
        logger.info("wrote %d prompts to %s", len(prompts), name)
    records = {
        "ppl_tuning.jsonl": ppl_records(language, spec.ppl_tuning, spec.seed_tuning + 1, spec, "tune"),
        "ppl_heldout.jsonl": ppl_records(language, spec.ppl_heldout, spec.seed_heldout + 1, spec, "held"),
    }
    for name, rows in records.items():
        (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
        scored = sum(len(row["target_token_ids"]) for row in rows)  # type: ignore[arg-type]
        logger.info("wrote %d PPL records (%d scored tokens) to %s", len(rows), scored, name)


def write_manifest(folder: Path, *, window: int, num_speculative: int, centroid_top_k: int) -> None:
    speculative = {"method": "mtp", "model": "drafter", "num_speculative_tokens": num_speculative}
    manifest = {
        "name": "tiny-gemma4-demo",
        "description": (
            "A tiny Gemma 4 text model with an MTP drafter, trained on a synthetic "
            "language, for running the sweeper end to end on CPU."
        ),
        "dependencies": [f"{DISTRIBUTION}[cpu]=={__version__}"],  # this project, pinned
        "model_id": "model",
        "served_model_name": "tiny-gemma4",
        "port": 8000,
        "serve": ["sweeper", "serve", "manifest.json"],
        "env": {
            "MODEL_ID": "model",
            "MAX_MODEL_LEN": "1024",
            "DTYPE": "float32",
            "ENFORCE_EAGER": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "SLIDING_WINDOW": str(window),
            "SPECULATIVE_CONFIG": json.dumps(speculative, separators=(",", ":")),
            "CENTROID_TOP_K": str(centroid_top_k),
        },
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    logger.info("wrote manifest.json (window %d, K %d, CTK %d)", window, num_speculative, centroid_top_k)
