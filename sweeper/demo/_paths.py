"""The bundled demo's files: ``demo_paths`` (the model, the drafter, both manifests, the data sets)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoPaths:
    model: Path
    drafter: Path
    manifest: Path
    gpu_manifest: Path
    prompts_tuning: Path
    prompts_heldout: Path
    ppl_tuning: Path
    ppl_heldout: Path

    def as_dict(self) -> dict[str, str]:
        return {key: str(value) for key, value in dataclasses.asdict(self).items()}

    def missing(self) -> list[str]:
        return [key for key, value in dataclasses.asdict(self).items() if not Path(value).exists()]


def demo_paths() -> DemoPaths:
    return DemoPaths(
        model=DATA_DIR / "model",
        drafter=DATA_DIR / "drafter",
        manifest=DATA_DIR / "manifest.json",
        gpu_manifest=DATA_DIR / "manifest-gpu.json",
        prompts_tuning=DATA_DIR / "prompts_tuning.json",
        prompts_heldout=DATA_DIR / "prompts_heldout.json",
        ppl_tuning=DATA_DIR / "ppl_tuning.jsonl",
        ppl_heldout=DATA_DIR / "ppl_heldout.jsonl",
    )
