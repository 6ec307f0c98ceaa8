"""The build pipeline: language -> tokenizer -> target -> drafter -> data -> manifest."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import torch

from .configs import DrafterSpec, TargetSpec, drafter_config, target_config
from .corpus import CorpusSpec, Language, make_words
from .demo_data import DataSpec, write_data, write_manifest
from .tokenizer import FIRST_WORD_ID, save_tokenizer

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildSettings:
    out: Path
    train: bool = True
    threads: int = 2
    seed: int = 20240611
    corpus: CorpusSpec = CorpusSpec()
    target: TargetSpec | None = None
    drafter: DrafterSpec = DrafterSpec()
    data: DataSpec = DataSpec()
    target_seconds: float = 480.0
    drafter_seconds: float = 300.0
    num_speculative: int = 3
    manifest_top_k: int = 8

    def replace(self, **changes: object) -> "BuildSettings":
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def target_spec(self) -> TargetSpec:
        vocab = FIRST_WORD_ID + self.corpus.num_words
        return self.target or TargetSpec(vocab_size=vocab)


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


def build(settings: BuildSettings) -> None:
    torch.set_num_threads(settings.threads)
    seed_everything(settings.seed)
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    target_spec = settings.target_spec()
    names = make_words(settings.corpus.num_words, settings.corpus.seed)
    language = Language(settings.corpus, FIRST_WORD_ID)

    model_dir, drafter_dir = out / "model", out / "drafter"
    for folder in (model_dir, drafter_dir):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)

    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    target = Gemma4ForCausalLM(target_config(target_spec)).float()
    drafter = Gemma4AssistantForCausalLM(drafter_config(settings.drafter, target_spec)).float()
    if settings.train:
        from .train_drafter import train_drafter
        from .train_target import train_target

        train_target(target, language, target_spec, settings.target_seconds, settings.seed)
        train_drafter(drafter, target, language, settings.drafter, settings.drafter_seconds, settings.seed + 1)
    else:
        logger.info("--random: weights stay untrained")
        from .centroids import install_centroids

        install_centroids(drafter, settings.drafter.num_centroids, settings.seed)

    save_model(target, model_dir)
    save_tokenizer(names, model_dir)
    save_model(drafter, drafter_dir)
    save_tokenizer(names, drafter_dir)
    write_data(language, names, settings.data, out)
    write_manifest(
        out,
        window=target_spec.sliding_window,
        num_speculative=settings.num_speculative,
        centroid_top_k=settings.manifest_top_k,
    )
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in (model_dir, drafter_dir)}
    logger.info("sizes: %s", {k: f"{v / 1e6:.1f} MB" for k, v in sizes.items()})


def save_model(model: torch.nn.Module, folder: Path) -> None:
    """Save in bf16 safetensors, with a greedy generation config."""
    model = model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(str(folder), safe_serialization=True)
    generation = folder / "generation_config.json"
    if generation.exists():
        config = json.loads(generation.read_text())
        config.update({"do_sample": False})
        generation.write_text(json.dumps(config, indent=2) + "\n")
    model.float()
    logger.info("saved %s to %s", type(model).__name__, folder)
