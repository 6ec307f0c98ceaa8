"""The patched server: a manifest's env turned into a vLLM OpenAI-server command.

``sweeper serve MANIFEST`` reads the same variable names as the challenge
manifests and starts ``vllm.entrypoints.openai.api_server`` (through
``vllm_main``, see there) with the equivalent arguments (it replaces itself
with vLLM, so signals reach vLLM directly). This module only builds the
command; it never imports vLLM.

Values come from the environment first (the harness and ServerProcess put
the manifest's env there, with overrides on top), then from the manifest.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeper.errors import ManifestError
from sweeper.manifest import SWEEPER_COMMAND, Manifest
from sweeper.serving._drafter import drafter_with_top_k

logger = logging.getLogger(__name__)

# runs vLLM's OpenAI server after hiding optional packages that cannot load (vllm_main.py)
SERVER_MODULE = "sweeper.serving.vllm_main"
GREEDY_GENERATION_CONFIG = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}

# env variable -> vLLM option taking its value as is
VALUE_OPTIONS = {
    "MAX_MODEL_LEN": "--max-model-len",
    "GPU_MEMORY_UTILIZATION": "--gpu-memory-utilization",
    "MAX_NUM_BATCHED_TOKENS": "--max-num-batched-tokens",
    "MAX_NUM_SEQS": "--max-num-seqs",
    "DTYPE": "--dtype",
    "KV_CACHE_DTYPE": "--kv-cache-dtype",
    "KV_CACHE_MEMORY_BYTES": "--kv-cache-memory-bytes",
    "QUANTIZATION": "--quantization",
    "TENSOR_PARALLEL_SIZE": "--tensor-parallel-size",
    "SEED": "--seed",
    "BLOCK_SIZE": "--block-size",
    "TOKENIZER": "--tokenizer",
    "REVISION": "--revision",
    "LOAD_FORMAT": "--load-format",
    "OPTIMIZATION_LEVEL": "--optimization-level",
    "PERFORMANCE_MODE": "--performance-mode",
    "MAX_LOGPROBS": "--max-logprobs",
}
# env variable -> vLLM on/off flag ("1"/"true" on, "0"/"false" off)
FLAG_OPTIONS = {
    "ENFORCE_EAGER": "--enforce-eager",
    "TRUST_REMOTE_CODE": "--trust-remote-code",
    "ENABLE_PREFIX_CACHING": "--enable-prefix-caching",
    "ENABLE_CHUNKED_PREFILL": "--enable-chunked-prefill",
}
# env variables holding JSON objects, passed as the option's JSON value
JSON_OPTIONS = {
    "COMPILATION_CONFIG": "--compilation-config",
}
# read here and turned into arguments by the code below
HANDLED = {
    "MODEL_ID",
    "model_id",
    "SERVED_MODEL_NAME",
    "served_model_name",
    "HOST",
    "PORT",
    "SLIDING_WINDOW",
    "HF_OVERRIDES",
    "SPECULATIVE_CONFIG",
    "CENTROID_TOP_K",
    "NUM_SPECULATIVE_TOKENS",
    "OVERRIDE_GENERATION_CONFIG",
    "VLLM_EXTRA_ARGS",
    *VALUE_OPTIONS,
    *FLAG_OPTIONS,
    *JSON_OPTIONS,
}
# read by other programs from the environment (vLLM, torch, the loader, our evaluators)
PASSED_THROUGH_PREFIXES = ("VLLM_", "PYTORCH_", "CUDA_", "HF_", "OMP_", "LD_", "TORCH", "WARMUP_")
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeCommand:
    """What ``sweeper serve`` will execute, and the settings it resolved."""

    argv: tuple[str, ...]
    model: str
    served_model_name: str
    host: str
    port: int
    hf_overrides: Mapping[str, Any]
    speculative_config: Mapping[str, Any] | None
    not_interpreted: tuple[str, ...]

    def shell(self) -> str:
        return shlex.join(self.argv)


def settings_from(manifest: Manifest, environ: Mapping[str, str]) -> dict[str, str]:
    """The manifest's env with the environment on top, for the keys of the manifest and ours."""
    settings = dict(manifest.env)
    for key in set(manifest.env) | HANDLED:
        if key in environ and environ[key] != settings.get(key, environ[key]):
            logger.info("%s from the environment overrides the manifest's value", key)
        if key in environ:
            settings[key] = environ[key]
    return settings


def check_serve_env(manifest: Manifest) -> None:
    """A manifest served by ``sweeper serve``: its env read as that server will read it,
    before any server starts and with nothing written (ManifestError naming a bad value,
    or a model or drafter folder that is missing). Another serve command reads the env
    itself (and may make its folders, as the challenge's serve.py scripts do): nothing
    to check here."""
    if tuple(manifest.serve[:2]) != (SWEEPER_COMMAND, "serve"):
        return
    manifest.check_local_models()
    build_serve_command(manifest, {**os.environ, **manifest.env}, check_only=True)


def build_serve_command(
    manifest: Manifest, environ: Mapping[str, str] | None = None, *, check_only: bool = False
) -> ServeCommand:
    """Translate the manifest (and environment) into the vLLM server command.

    ``check_only``: every value checked, no drafter copy built (``check_serve_env``)."""
    environ = os.environ if environ is None else environ
    settings = settings_from(manifest, environ)
    label = str(manifest.source or "<manifest>")
    folder = manifest.folder

    model = settings.get("MODEL_ID") or settings.get("model_id") or manifest.model_id
    if not model:
        raise ManifestError(label, "model_id", "is missing (also no MODEL_ID in env)")
    model = _local_path_or_id(model, folder)
    served = settings.get("SERVED_MODEL_NAME") or settings.get("served_model_name")
    served = served or manifest.served_model_name or model
    host = settings.get("HOST") or "127.0.0.1"
    port = _integer(settings.get("PORT") or str(manifest.port), label, "env.PORT")

    argv: list[str] = [sys.executable, "-m", SERVER_MODULE, "--model", model]
    argv += ["--served-model-name", served, "--host", host, "--port", str(port)]
    for key, option in VALUE_OPTIONS.items():
        if settings.get(key):
            argv += [option, settings[key]]
    for key, option in FLAG_OPTIONS.items():
        if key in settings:
            if _flag(settings[key], label, key):
                argv.append(option)
            elif option != "--enforce-eager" and option != "--trust-remote-code":
                argv.append("--no-" + option[2:])
    for key, option in JSON_OPTIONS.items():
        if settings.get(key):
            argv += [option, json.dumps(_json_object(settings[key], label, key))]

    hf_overrides = _hf_overrides(settings, model, label)
    if hf_overrides:
        argv += ["--hf-overrides", json.dumps(hf_overrides)]

    speculative = _speculative_config(settings, folder, label, check_only=check_only)
    if speculative:
        argv += ["--speculative-config", json.dumps(speculative)]

    generation = settings.get("OVERRIDE_GENERATION_CONFIG")
    generation_config = (
        _json_object(generation, label, "OVERRIDE_GENERATION_CONFIG") if generation else GREEDY_GENERATION_CONFIG
    )
    argv += ["--override-generation-config", json.dumps(generation_config)]

    if settings.get("VLLM_EXTRA_ARGS"):
        argv += shlex.split(settings["VLLM_EXTRA_ARGS"])

    not_interpreted = tuple(
        sorted(key for key in manifest.env if key not in HANDLED and not key.startswith(PASSED_THROUGH_PREFIXES))
    )
    return ServeCommand(
        argv=tuple(argv),
        model=model,
        served_model_name=served,
        host=host,
        port=port,
        hf_overrides=hf_overrides,
        speculative_config=speculative,
        not_interpreted=not_interpreted,
    )


def exec_server(command: ServeCommand, env: Mapping[str, str]) -> None:  # pragma: no cover
    """Replace this process with the vLLM server, running with ``env``."""
    logger.info("exec: %s", command.shell())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command.argv[0], list(command.argv), dict(env))


# -- the knobs ------------------------------------------------------------


def _hf_overrides(settings: Mapping[str, str], model: str, label: str) -> dict[str, Any]:
    overrides = _json_object(settings["HF_OVERRIDES"], label, "HF_OVERRIDES") if settings.get("HF_OVERRIDES") else {}
    window = settings.get("SLIDING_WINDOW")
    if window:
        size = _integer(window, label, "env.SLIDING_WINDOW")
        if size <= 0:
            raise ManifestError(label, "env.SLIDING_WINDOW", f"must be positive, not {size}")
        if _config_nests_text_config(model) or "text_config" in overrides:
            target = overrides.setdefault("text_config", {})
        else:
            target = overrides
        if "sliding_window" in target and target["sliding_window"] != size:
            logger.info(
                "SLIDING_WINDOW=%d replaces sliding_window=%s from HF_OVERRIDES",
                size,
                target["sliding_window"],
            )
        target["sliding_window"] = size
    return overrides


def _speculative_config(
    settings: Mapping[str, str], folder: Path, label: str, *, check_only: bool = False
) -> dict[str, Any] | None:
    raw = settings.get("SPECULATIVE_CONFIG")
    top_k = settings.get("CENTROID_TOP_K")
    if not raw:
        if top_k:
            logger.info("CENTROID_TOP_K is ignored: no SPECULATIVE_CONFIG (no drafter)")
        return None
    config = _json_object(raw, label, "SPECULATIVE_CONFIG")
    if settings.get("NUM_SPECULATIVE_TOKENS"):
        config["num_speculative_tokens"] = _integer(
            settings["NUM_SPECULATIVE_TOKENS"], label, "env.NUM_SPECULATIVE_TOKENS"
        )
    if isinstance(config.get("model"), str):
        config["model"] = _local_path_or_id(config["model"], folder)
    if top_k:
        if not isinstance(config.get("model"), str):
            raise ManifestError(label, "env.SPECULATIVE_CONFIG", "needs a 'model' (the drafter) for CENTROID_TOP_K")
        value = _integer(top_k, label, "env.CENTROID_TOP_K")
        config["model"] = str(drafter_with_top_k(config["model"], value, label=label, check_only=check_only))
    return config


def _config_nests_text_config(model: str) -> bool:
    """Does the model's config.json keep the text settings under ``text_config``?"""
    local = Path(model) / "config.json"
    config_path = local if local.is_file() else _hub_config(model)
    if config_path is None:
        # not resolvable offline: multimodal Gemma configs nest, text-only ones do not
        return "gemma-3" in model.lower() or "gemma-4" in model.lower()
    try:
        return "text_config" in json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError):
        return False


def _hub_config(model: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    cached = try_to_load_from_cache(model, "config.json")
    return Path(cached) if isinstance(cached, str) else None


def _local_path_or_id(value: str, folder: Path) -> str:
    """A path relative to the manifest's folder becomes absolute; a hub id stays."""
    candidate = Path(value).expanduser()
    if not candidate.is_absolute():
        candidate = folder / candidate
    return str(candidate.resolve()) if candidate.exists() else value


def _json_object(raw: str, label: str, key: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ManifestError(label, f"env.{key}", f"is not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ManifestError(label, f"env.{key}", "must be a JSON object")
    return value


def _integer(raw: str, label: str, field: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ManifestError(label, field, f"must be an integer, not {raw!r}") from None


def _flag(raw: str, label: str, key: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ManifestError(label, f"env.{key}", f"must be 1/0 or true/false, not {raw!r}")
