"""ServerProcess + `sweeper serve` with real vLLM on the bundled tiny Gemma 4 model."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from sweeper.manifest import Manifest
from sweeper.serving import ServerProcess, port_is_free, processes

pytestmark = pytest.mark.server


def counter(metrics: str, name: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_knobs_applied_and_server_cleaned_up(demo_manifest: Manifest, tmp_path):
    spec = {"method": "mtp", "model": "drafter", "num_speculative_tokens": 2}
    overrides = {
        "SLIDING_WINDOW": "24",
        "CENTROID_TOP_K": "4",
        "SPECULATIVE_CONFIG": json.dumps(spec),
    }
    server = ServerProcess(demo_manifest, overrides=overrides, log_path=tmp_path / "server.log", ready_timeout_s=600)
    with server, httpx.Client(base_url=server.base_url, timeout=120) as client:
        models = client.get("/v1/models").json()
        assert [entry["id"] for entry in models["data"]] == ["tiny-gemma4"]
        assert server.base_url.startswith("http://127.0.0.1:")

        log = server.log_path.read_text()
        assert re.search(r"centroids masking enabled \(num_centroids=\d+, top_k=4,", log)
        assert "sweeper patch applied: centroid-graphs-cpu" in log
        assert '"sliding_window": 24' in log  # the --hf-overrides sweeper serve passed
        assert '"num_speculative_tokens": 2' in log

        prompt = [2, 10, 11, 12, 13, 14, 15, 16]
        body = {
            "model": "tiny-gemma4",
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0,
            "prompt_logprobs": 1,
            "add_special_tokens": False,
        }
        choice = client.post("/v1/completions", json=body).json()["choices"][0]
        entries = choice["prompt_logprobs"]
        assert len(entries) == len(prompt)
        assert entries[0] is None
        for position, token in enumerate(prompt[1:], start=1):
            logprob = entries[position][str(token)]["logprob"]
            assert logprob <= 0.0

        before = client.get("/metrics").text
        chat = {
            "model": "tiny-gemma4",
            "messages": [{"role": "user", "content": "ka lo mi"}],
            "max_tokens": 64,
            "temperature": 0,
            "ignore_eos": True,
        }
        usage = client.post("/v1/chat/completions", json=chat).json()["usage"]
        assert usage["completion_tokens"] == 64
        after = client.get("/metrics").text
        drafts = counter(after, "vllm:spec_decode_num_drafts_total") - counter(
            before, "vllm:spec_decode_num_drafts_total"
        )
        accepted = counter(after, "vllm:spec_decode_num_accepted_tokens_total") - counter(
            before, "vllm:spec_decode_num_accepted_tokens_total"
        )
        assert drafts > 0
        assert accepted > 0
        pid, port = server.pid, server.port
    assert processes.group_members(pid) == []
    assert port_is_free(port)
    assert server.stop_seconds is not None
