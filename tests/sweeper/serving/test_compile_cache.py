"""The compile-cache folder of a server: one per speculative-token count and per knob vLLM cannot see."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sweeper.serving import COMPILE_CACHE_VARIABLE, CompileCache, speculative_tokens
from sweeper.serving._compile_cache import MODEL_INFOS, TRITON_CACHE_VARIABLE
from sweeper.serving.warm_child import READ_WHEN_USED

SPEC = json.dumps({"method": "mtp", "model": "drafter", "num_speculative_tokens": 3})
SWEEPER_SERVE = ["sweeper", "serve", "manifest.json"]


def digest(pairs: list[list]) -> str:
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:12]


def test_k_and_the_knobs_vllm_does_not_hash_name_the_folder(tmp_path: Path) -> None:
    cache = CompileCache(root=tmp_path / "root")
    env = {"SLIDING_WINDOW": "24", "CENTROID_TOP_K": "4", "SPECULATIVE_CONFIG": SPEC, "MY_PATCH": "on"}
    swept = ["SLIDING_WINDOW", "CENTROID_TOP_K", "SPECULATIVE_CONFIG", "MY_PATCH"]
    # sweeper serve turns the window and top-k into vLLM's own config (hashed by vLLM); MY_PATCH it does not
    folder = cache.folder_for(env, swept, SWEEPER_SERVE, tmp_path / "trial")
    assert folder == tmp_path / "root" / f"k3-{digest([['MY_PATCH', 'on']])}"
    assert cache.folder_for({**env, "SLIDING_WINDOW": "64"}, swept, SWEEPER_SERVE, tmp_path) == folder
    assert cache.folder_for({**env, "MY_PATCH": "off"}, swept, SWEEPER_SERVE, tmp_path) != folder
    assert cache.folder_for({**env, "NUM_SPECULATIVE_TOKENS": "2"}, swept, SWEEPER_SERVE, tmp_path).name.startswith(
        "k2-"
    )
    # a serve command of the user's own: vLLM may see none of the swept knobs
    own = cache.folder_for(env, swept, ["python", "serve.py"], tmp_path)
    expected = [[k, env[k]] for k in sorted(swept)]
    assert own == tmp_path / "root" / f"k3-{digest(expected)}"
    # --fresh-cache: the server's own empty folder; a manifest's own VLLM_CACHE_ROOT is kept
    fresh = CompileCache(root=tmp_path / "root", fresh=True)
    assert fresh.env_for(env, swept, SWEEPER_SERVE, tmp_path / "t1") == {
        COMPILE_CACHE_VARIABLE: str(tmp_path / "t1" / "compile-cache")
    }
    mine = {COMPILE_CACHE_VARIABLE: "/mine", TRITON_CACHE_VARIABLE: "/mine/triton"}
    assert cache.env_for({**env, **mine}, swept, SWEEPER_SERVE, tmp_path) == {}


def test_every_kind_of_a_host_shares_the_model_infos_and_triton_kernels(tmp_path: Path) -> None:
    cache = CompileCache(root=tmp_path / "root")
    env = {"SPECULATIVE_CONFIG": SPEC}
    k3 = cache.env_for(env, [], SWEEPER_SERVE, tmp_path / "t1")
    k5 = cache.env_for({**env, "NUM_SPECULATIVE_TOKENS": "5"}, [], SWEEPER_SERVE, tmp_path / "t2")
    assert k3[COMPILE_CACHE_VARIABLE] != k5[COMPILE_CACHE_VARIABLE]
    assert k3[TRITON_CACHE_VARIABLE] == k5[TRITON_CACHE_VARIABLE] == str(tmp_path / "root" / "triton")
    # what differs between the kinds must not key a warm launcher, or each K would start one of its own
    assert set(k3) == set(k5) == READ_WHEN_USED
    # what vLLM's registry writes under one kind's root, the other kind reads
    info = Path(k3[COMPILE_CACHE_VARIABLE]) / MODEL_INFOS / "vllm-model_executor-models-gemma4-Gemma4ForCausalLM.json"
    info.write_text('{"hash": "h"}')
    assert (Path(k5[COMPILE_CACHE_VARIABLE]) / MODEL_INFOS / info.name).read_text() == '{"hash": "h"}'
    assert (tmp_path / "root" / MODEL_INFOS / info.name).exists()
    # asked again (the next trial of that kind), nothing changes; a folder of an older sweeper keeps its own
    assert cache.env_for(env, [], SWEEPER_SERVE, tmp_path / "t3") == k3
    older = tmp_path / "root" / "k7-older"
    (older / MODEL_INFOS).mkdir(parents=True)
    cache._share_model_infos(older)
    assert not (older / MODEL_INFOS).is_symlink()
    # the manifest's own Triton folder is kept; --fresh-cache shares nothing
    assert TRITON_CACHE_VARIABLE not in cache.env_for({**env, TRITON_CACHE_VARIABLE: "/t"}, [], SWEEPER_SERVE, tmp_path)
    fresh = CompileCache(root=tmp_path / "fresh-root", fresh=True).env_for(env, [], SWEEPER_SERVE, tmp_path / "t4")
    assert list(fresh) == [COMPILE_CACHE_VARIABLE] and not (tmp_path / "fresh-root").exists()


def test_the_speculative_token_count_as_the_server_reads_it() -> None:
    assert speculative_tokens({"SPECULATIVE_CONFIG": SPEC}) == 3
    assert speculative_tokens({"SPECULATIVE_CONFIG": SPEC, "NUM_SPECULATIVE_TOKENS": "5"}) == 5
    assert speculative_tokens({}) == 0 and speculative_tokens({"SPECULATIVE_CONFIG": "not json"}) == 0
