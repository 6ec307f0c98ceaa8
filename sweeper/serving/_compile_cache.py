"""Where vLLM keeps its compiled graphs for a study's servers, separated where its own key is unsafe.

vLLM caches ``torch.compile`` output under ``VLLM_CACHE_ROOT/torch_compile_cache/<hash>``, the
hash taken over the model's configuration (a new sliding window through ``--hf-overrides`` or
another drafter folder for ``CENTROID_TOP_K`` gets a folder of its own) and vLLM's registered
variables. Two things change the graph without changing that hash:

* the number of speculative tokens (upstream reports a crash when an artifact compiled for
  another K is reused), and
* a variable that a patched ``serve.py`` reads itself (vLLM never sees it).

``CompileCache.env_for`` therefore gives each server a ``VLLM_CACHE_ROOT`` of its own kind:
``<root>/k<K>-<digest>``, the digest over the swept variables that ``sweeper serve`` does not
turn into vLLM arguments (for a manifest with its own serve command: every swept variable).
The root is per host (``<sweeper cache>/compile/<host>``), kept across studies. With
``fresh=True`` (``--fresh-cache``) every server gets an empty folder of its own in its trial's
folder. A manifest that sets ``VLLM_CACHE_ROOT`` itself keeps its own.

Two caches that vLLM keeps under the same root are safe to share, and are shared by every
kind of the host's (not with ``--fresh-cache``):

* ``modelinfos``: what vLLM's model registry learns about a model class, keyed on the hash of
  its file. Without it the API server inspects each class in a new interpreter that imports
  vLLM: on an H100 on 2026-12-07, 23-28 s for each of Gemma 4's two classes, in the first
  server of every new K. Each kind's ``modelinfos`` is a link to the root's.
* Triton's kernels, keyed on their source and constants: vLLM otherwise keeps them beside the
  compiled graphs of each configuration (``TRITON_CACHE_DIR`` unset), so every new window or K
  built the same kernels again (about 18 s on that H100). ``TRITON_CACHE_DIR`` is ``<root>/triton``
  unless the manifest sets it.

vLLM 0.26 and 0.32 read ``VLLM_CACHE_ROOT`` only inside functions, when they compile or save
(never while a module imports), so servers forked from one warm launcher may use different roots.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

from sweeper.manifest import SWEEPER_COMMAND
from sweeper.serving._command import HANDLED
from sweeper.serving._drafter import cache_root

COMPILE_CACHE_VARIABLE = "VLLM_CACHE_ROOT"
TRITON_CACHE_VARIABLE = "TRITON_CACHE_DIR"
MODEL_INFOS = "modelinfos"  # the model registry's folder under VLLM_CACHE_ROOT (vLLM 0.26)


def speculative_tokens(env: Mapping[str, str]) -> int:
    """K as the server will read it (NUM_SPECULATIVE_TOKENS over SPECULATIVE_CONFIG), 0 without a drafter."""
    if env.get("NUM_SPECULATIVE_TOKENS", "").strip().isdigit():
        return int(env["NUM_SPECULATIVE_TOKENS"])
    try:
        config = json.loads(env.get("SPECULATIVE_CONFIG") or "{}")
    except json.JSONDecodeError:
        return 0
    value = config.get("num_speculative_tokens") if isinstance(config, dict) else None
    return value if isinstance(value, int) else 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileCache:
    """The compile-cache folders of a study's servers: one per host, kind of graph, or server."""

    root: Path = dataclasses.field(default_factory=lambda: cache_root().parent / "compile" / socket.gethostname())
    fresh: bool = False

    def folder_for(
        self, env: Mapping[str, str], swept: Iterable[str], serve: Iterable[str], server_folder: Path
    ) -> Path:
        """The ``VLLM_CACHE_ROOT`` of a server with ``env`` (the rendered manifest's, with the trial's
        values), whose study sweeps ``swept``, started by the serve command ``serve``."""
        if self.fresh:
            return server_folder / "compile-cache"
        own_serve = list(serve)[:2] != [SWEEPER_COMMAND, "serve"]
        unhashed = sorted(k for k in swept if own_serve or k not in HANDLED)
        digest = hashlib.sha256(json.dumps([[k, env.get(k)] for k in unhashed]).encode()).hexdigest()[:12]
        return self.root / f"k{speculative_tokens(env)}-{digest}"

    def env_for(
        self, env: Mapping[str, str], swept: Iterable[str], serve: Iterable[str], server_folder: Path
    ) -> dict[str, str]:
        """``{VLLM_CACHE_ROOT: folder, TRITON_CACHE_DIR: the root's}``, each left out where the
        manifest sets its own; the folder is made, its model-info cache linked to the root's."""
        out: dict[str, str] = {}
        if COMPILE_CACHE_VARIABLE not in env:
            folder = self.folder_for(env, swept, serve, server_folder)
            if not self.fresh:
                self._share_model_infos(folder)
            out[COMPILE_CACHE_VARIABLE] = str(folder)
        if not self.fresh and TRITON_CACHE_VARIABLE not in env:
            out[TRITON_CACHE_VARIABLE] = str(self.root / "triton")
        return out

    def _share_model_infos(self, folder: Path) -> None:
        """Make ``folder/modelinfos`` a link to the root's (a folder of an older sweeper keeps its own)."""
        shared = self.root / MODEL_INFOS
        shared.mkdir(parents=True, exist_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / MODEL_INFOS
        if not link.is_symlink() and not link.exists():
            try:
                link.symlink_to(shared, target_is_directory=True)
            except FileExistsError:  # another worker of the study made it first
                pass
