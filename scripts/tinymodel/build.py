"""The build pipeline: language -> tokenizer -> target -> drafter -> data -> manifest."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from .configs import DrafterSpec, TargetSpec, drafter_config, target_config
from .corpus import CorpusSpec, Language, make_words
from .demo_data import DataSpec, write_data, write_manifest
from .tokenizer import FIRST_WORD_ID, save_tokenizer
from .train_drafter import DrafterTraining, train_drafter
from .train_target import TargetTraining, silence_global_attention, train_target
from .widen import widen_mlps

logger = logging.getLogger(__name__)

OUTPUTS = (
    "model",
    "drafter",
    "prompts_tuning.json",
    "prompts_heldout.json",
    "ppl_tuning.jsonl",
    "ppl_heldout.jsonl",
    "manifest.json",
)


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
    target_training: TargetTraining = TargetTraining()
    drafter_training: DrafterTraining = DrafterTraining()
    widen: int = 15  # MLP width after training = trained width x widen (see widen.py)
    num_speculative: int = 3
    manifest_top_k: int = 8

    def replace(self, **changes: object) -> BuildSettings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def target_spec(self) -> TargetSpec:
        vocab = FIRST_WORD_ID + self.corpus.num_words
        return self.target or TargetSpec(vocab_size=vocab)


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


def build(settings: BuildSettings) -> dict[str, object]:
    """Build everything into a staging folder, then move it into ``settings.out``."""
    torch.set_num_threads(settings.threads)
    seed_everything(settings.seed)
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    staging = out / ".staging"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    target_spec = settings.target_spec()
    names = make_words(settings.corpus.num_words, settings.corpus.seed)
    language = Language(settings.corpus, FIRST_WORD_ID)
    report: dict[str, object] = {}

    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    target = Gemma4ForCausalLM(target_config(target_spec)).float()
    drafter = Gemma4AssistantForCausalLM(drafter_config(settings.drafter, target_spec)).float()
    logger.info(
        "target %.2fM parameters, drafter %.2fM",
        sum(p.numel() for p in target.parameters()) / 1e6,
        sum(p.numel() for p in drafter.parameters()) / 1e6,
    )
    if settings.train:
        started = time.monotonic()
        report["target"] = train_target(target, language, settings.target_training, settings.seed, drafter=drafter)
        report["target_seconds"] = round(time.monotonic() - started)
        started = time.monotonic()
        report["drafter"] = train_drafter(
            drafter,
            target,
            language,
            settings.drafter_training,
            settings.drafter.num_centroids,
            settings.seed + 1,
        )
        report["drafter_seconds"] = round(time.monotonic() - started)
    else:
        logger.info("--random: weights stay untrained")
        from .centroids import install_centroids

        silence_global_attention(target)
        install_centroids(drafter, settings.drafter.num_centroids, settings.seed)
    widen_mlps(target, settings.widen)

    save_model(target, staging / "model")
    save_tokenizer(names, staging / "model")
    save_model(drafter, staging / "drafter")
    save_tokenizer(names, staging / "drafter")
    write_data(language, names, settings.data, staging)
    write_manifest(
        staging,
        window=target_spec.sliding_window,
        num_speculative=settings.num_speculative,
        centroid_top_k=settings.manifest_top_k,
    )
    publish(staging, out)
    sizes = {name: _size(out / name) for name in OUTPUTS}
    report["sizes_mb"] = {k: round(v / 1e6, 2) for k, v in sizes.items()}
    logger.info("sizes: %s (total %.1f MB)", report["sizes_mb"], sum(sizes.values()) / 1e6)
    return report


def publish(staging: Path, out: Path) -> None:
    """Replace the outputs in ``out`` with the staged ones, one rename each."""
    for name in OUTPUTS:
        new, old = staging / name, out / name
        if old.is_dir():
            retired = out / f".old-{name}"
            if retired.exists():
                shutil.rmtree(retired)
            old.rename(retired)
            new.rename(old)
            shutil.rmtree(retired)
        else:
            new.replace(old)
    shutil.rmtree(staging)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def save_model(model: torch.nn.Module, folder: Path) -> None:
    """Save in bf16 safetensors, with a greedy generation config."""
    folder.mkdir(parents=True, exist_ok=True)
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
