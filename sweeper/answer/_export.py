"""Export the study's answer as a manifest that runs as is.

The exported manifest is the base manifest with the winning trial's env
(exactly what its server ran with), a name derived from the searched
values (``tiny-gemma4-demo-w32-ctk8-k3``) and a description that carries
the measured TPS and PPL, the verification status and what the trial was
measured on (GPU, driver, CUDA and vLLM versions, peak GPU memory). Every
other field of the base manifest is kept. Secret-looking env values (tokens, keys,
passwords) are left out: the harness and ``sweeper serve`` take them from
the environment.

Where it points and what it installs (``_placement.place_manifest``): its
paths (``MODEL_ID``, the drafter in ``SPECULATIVE_CONFIG``, ``model_id``,
``serve`` arguments, local-path dependencies) are relative to the exported
manifest's folder where the files lie in it or below it, else absolute
(``ExportResult.absolute_paths``, for a warning); a dependency naming this
project is pinned to this version (``sweeper-serving[cpu]==0.1.0``); the
base manifest's other dependencies and its ``serve`` command are kept.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storage import TrialRecord, study_status
from sweeper import invocation
from sweeper.answer._candidates import Answer, AnswerStatus, study_answer, verify_command
from sweeper.answer._figure import answer_figure
from sweeper.answer._placement import PlacedManifest, absolute_paths_warning, place_manifest
from sweeper.answer._verify_result import heldout_statement, heldout_text
from sweeper.errors import StudyError, UserInputError
from sweeper.manifest import Manifest, is_secret_name
from sweeper.study import ConfirmSettings, StudyRecipe, base_manifest_of, ppl_statement, recipe_from_settings

logger = logging.getLogger(__name__)

# short names of the well-known knobs in derived manifest names
ABBREVIATIONS = {"sliding_window": "w", "centroid_top_k": "ctk", "num_speculative_tokens": "k"}
_TRIAL_SUFFIX = re.compile(r"-trial-\d+$")


class NothingToExportError(StudyError):
    """The study has no trial that could be exported."""


class UnverifiedAnswerError(StudyError):
    """The study's answer has not passed verification (and --allow-unverified was not given)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportResult:
    path: Path
    manifest: Manifest
    answer: Answer
    left_out_secrets: tuple[str, ...]
    # field -> absolute path outside the exported manifest's folder (it runs only where these exist)
    absolute_paths: Mapping[str, str]
    # dependency naming this project as the base manifest wrote it -> pinned to this version
    pinned_dependencies: Mapping[str, str]

    def serve_hint(self, shown: str | None = None) -> str:
        """How the exported manifest is run, as its own ``serve`` says (``shown``: the path as
        the user spelled it): ``sweeper serve FILE`` for a manifest that serves itself with
        sweeper, else its command from its folder with its env, as the harness runs it."""
        shown = shown or str(self.path)
        serve = self.manifest.serve
        if serve and serve[0] == "sweeper":
            return f"run it with: {invocation.command('serve ' + shlex.quote(shown))}"
        folder = os.path.dirname(shown) or "."
        return f"run it as the harness does: in {folder}, {shlex.join(serve)} with the manifest's env"

    def absolute_paths_warning(self, shown_folder: str | None = None) -> str | None:
        """One line naming each path written absolute (``shown_folder``: the folder as the user
        spelled it), or None when every path is relative to the manifest's folder."""
        return absolute_paths_warning(self.absolute_paths, shown_folder or str(self.path.parent))

    def to_dict(self) -> dict[str, Any]:
        record = self.answer.record
        return {
            "path": str(self.path),
            "name": self.manifest.name,
            "trial": record.number if record else None,
            "status": self.answer.status,
            "tps": answer_figure(self.answer),
            "ppl": record.ppl if record else None,
            "left_out_secrets": list(self.left_out_secrets),
            "absolute_paths": dict(self.absolute_paths),
            "pinned_dependencies": dict(self.pinned_dependencies),
        }


def derived_name(base_name: str, params: Mapping[str, Any]) -> str:
    """``<base>-w32-ctk8-k3``: the base name and each searched value, short."""
    parts = [_TRIAL_SUFFIX.sub("", base_name)]
    for name, value in params.items():
        short = ABBREVIATIONS.get(name) or "".join(word[:1] for word in name.split("_") if word)
        parts.append(f"{short}{_value_text(value)}")
    return "-".join(parts)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        text = f"{value:g}"
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9]+", "", text.replace(".", "p").replace("-", "m")) or "x"


def describe(answer: Answer, study_name: str, base: Manifest, settings: Mapping[str, Any] | None = None) -> str:
    """The exported manifest's description: figures, claim, verification, provenance.

    ``settings``: the study's stored settings, for the PPL's re-run chance
    (the gate's re-run size; under a relative cap the baseline's noise).
    """
    record = answer.record
    assert record is not None
    settings = settings or {}
    params = ", ".join(f"{k}={v}" for k, v in record.params.items())
    estimate = answer.tps_estimate("fresh servers")
    tuned = f"TPS {estimate}" if estimate is not None else f"TPS {record.tps:.2f}"
    text = (
        f"Exported by sweeper from study '{study_name}', trial #{record.number} ({params}). "
        f"Tuned: {tuned}, PPL {record.ppl:.4f}"
        + (f" (cap {record.ppl_cap:.4f})" if record.ppl_cap is not None else "")
        + ". "
    )
    tuned_ppl = ppl_statement(record.ppl, record.extras, record.ppl_cap, settings)
    if tuned_ppl is not None and tuned_ppl.known:
        chance = tuned_ppl.chance_text()
        text += f"Tuned PPL: {tuned_ppl.interval_text()}" + (f"; {chance}" if chance else "") + ". "
    claim = answer.claim_text()
    if claim:
        text += f"Claim: {claim[0].upper()}{claim[1:]}. "
    verification = answer.verification
    if answer.verified and verification is not None:
        text += (
            f"VERIFIED on held-out data: median TPS {verification.median_tps:.2f} over "
            f"{len(verification.runs)} fresh servers, PPL at most {verification.max_ppl:.4f}, "
            f"tolerance {verification.tolerance:.0%}."
        )
        heldout = heldout_statement(verification, settings)
        if heldout is not None and heldout.known:
            text += f" The {heldout_text(heldout)}."
    elif answer.status is AnswerStatus.FAILED and verification is not None:
        text += f"FAILED verification: {verification.reason}."
    else:
        text += "UNVERIFIED: not re-measured on held-out data."
    provenance = measured_on(record)
    if provenance:
        text += f" Measured on {provenance}."
    if base.description:
        text += f" Base manifest '{base.name}': {base.description}"
    return text


# the trial's versions and extras that say what it was measured on, in the order shown
_PROVENANCE = (
    ("gpu", "versions", "{}"),
    ("gpu_count", "versions", "x{}"),
    ("nvidia_driver", "versions", "driver {}"),
    ("cuda_driver", "versions", "CUDA {}"),
    ("vllm", "versions", "vLLM {}"),
    ("gpu_peak_memory_mib", "extras", "peak GPU memory {:.0f} MiB"),
)


def measured_on(record: TrialRecord) -> str:
    """``NVIDIA H200 x1, driver 580.65.06, CUDA 13.0, vLLM 0.26.0, peak GPU memory 43500 MiB``."""
    parts: list[str] = []
    for key, column, template in _PROVENANCE:
        value = getattr(record, column).get(key)
        if value is None or value == "":
            continue
        try:
            text = template.format(value)
        except (ValueError, TypeError):
            text = f"{key} {value}"
        if key == "gpu_count" and parts:
            parts[-1] += f" {text}"
        else:
            parts.append(text)
    return ", ".join(parts)


def export_answer(
    *,
    storage: str | None,
    study_name: str | None = None,
    output: str | Path | None = None,
    base_manifest: Manifest | None = None,
    recipe: StudyRecipe | None = None,
    allow_unverified: bool = False,
) -> ExportResult:
    """Write the study's answer as a manifest (atomically); nothing is written on refusal.

    ``output`` None: ``<derived name>.json`` in the current folder.
    """
    status = study_status(storage, study_name)
    study_name = status.study_name
    if not status.trials:
        raise NothingToExportError(
            f"study {study_name!r} has no trials yet: nothing to export (run 'sweeper run' first)"
        )
    answer = study_answer(status.trials, status.verifications, ConfirmSettings.from_settings(status.settings))
    record = answer.record
    if record is None:
        measured = sum(1 for r in status.trials if r.state == "complete")
        raise NothingToExportError(
            f"study {study_name!r} has no feasible trial: none of its {len(status.trials)} trials "
            f"({measured} measured) passed the PPL cap, so there is no manifest to export"
        )
    if not answer.verified and not allow_unverified:
        if answer.status is AnswerStatus.FAILED and answer.verification is not None:
            why = f"failed verification ({answer.verification.reason})"
            how = f"verify more candidates with '{verify_command(study_name, storage)} --top N'"
        else:
            why = "has not been verified on held-out data"
            how = f"verify it with '{verify_command(study_name, storage)}'"
        figure = answer_figure(answer)
        tps = "TPS -" if figure is None else f"TPS {figure:.2f}"
        raise UnverifiedAnswerError(
            f"the best trial of study {study_name!r}, #{record.number} ({tps}, "
            f"PPL {record.ppl:.4f}), {why}: {how}, or pass --allow-unverified to export it anyway"
        )
    recipe = recipe if recipe is not None else recipe_from_settings(status.settings)
    base = base_manifest_of(recipe, base_manifest)
    name = derived_name(base.name, record.params)
    path = Path(output) if output is not None else Path(f"{name}.json")
    path = path.expanduser().resolve()
    if base.source is not None and path == base.source.resolve():
        raise UserInputError(f"{path} is the base manifest itself: export the answer to another file (-o PATH)")
    placed, secrets = answer_manifest(
        base,
        record,
        answer,
        study_name=study_name,
        output=path,
        recipe=recipe,
        settings=status.settings,
    )
    placed.manifest.save(path)
    logger.info("exported trial %d of %s to %s", record.number, study_name, path)
    return ExportResult(
        path=path,
        manifest=placed.manifest,
        answer=answer,
        left_out_secrets=secrets,
        absolute_paths=placed.absolute_paths,
        pinned_dependencies=placed.pinned,
    )


def answer_manifest(
    base: Manifest,
    record: TrialRecord,
    answer: Answer,
    *,
    study_name: str,
    output: Path,
    recipe: StudyRecipe | None = None,
    settings: Mapping[str, Any] | None = None,
) -> tuple[PlacedManifest, tuple[str, ...]]:
    """The exported manifest placed for ``output`` (its paths and pinned dependencies), the secret
    env names left out."""
    recipe = recipe or StudyRecipe()
    rendered = base.render({**recipe.overrides, **record.overrides})
    env = dict(rendered.env)
    stored = record.manifest.get("env") if isinstance(record.manifest, Mapping) else None
    if isinstance(stored, Mapping) and stored:
        differs = sorted(k for k in set(stored) | set(env) if not is_secret_name(k) and stored.get(k) != env.get(k))
        if differs:
            logger.warning(
                "trial %d ran with env values that differ from the base manifest as it is now "
                "(%s): exporting what the trial ran with",
                record.number,
                ", ".join(differs),
            )
        env = {k: str(v) for k, v in stored.items()}
    secrets = tuple(sorted(k for k in {**base.env, **env} if is_secret_name(k)))
    env = {k: v for k, v in env.items() if not is_secret_name(k)}
    fields: dict[str, Any] = {
        "name": derived_name(base.name, record.params),
        "description": describe(answer, study_name, base, settings),
    }
    return place_manifest(base, env, output, **fields), secrets
