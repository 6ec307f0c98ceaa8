"""``sweeper.serving.vllm_main``: packages that are installed but cannot load are hidden before vLLM
starts, as if absent; those that load, and those not installed, are left alone. Real packages
written by the test fail to load the ways torchvision, torchaudio and torchcodec built for another
torch do."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

from sweeper.serving.vllm_main import hide_unloadable

PACKAGES = {
    "probe_vision": "raise RuntimeError('operator probe_vision::nms does not exist')\n",
    "probe_audio": "raise OSError('Could not load this library: /x/_probe_audio.so')\n",
    "probe_fine": "VALUE = 7\n",
    "probe_partial": "from . import loaded\nimport probe_missing_dependency\n",
}


@pytest.fixture
def probes(tmp_path, monkeypatch):
    for name, text in PACKAGES.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(text)
    (tmp_path / "probe_partial" / "loaded.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m.startswith("probe_")]:
        del sys.modules[name]


def test_packages_that_fail_to_load_are_hidden_and_the_others_left_alone(probes) -> None:
    names = ("probe_vision", "probe_audio", "probe_fine", "probe_partial", "probe_not_installed")
    hidden = hide_unloadable(names)

    assert hidden == {
        "probe_vision": "RuntimeError: operator probe_vision::nms does not exist",
        "probe_audio": "OSError: Could not load this library: /x/_probe_audio.so",
        "probe_partial": "ModuleNotFoundError: No module named 'probe_missing_dependency'",
    }
    for name in hidden:
        # absent to whoever asks, as transformers does (find_spec) and as an import does
        assert importlib.util.find_spec(name) is None
        with pytest.raises(ImportError):
            importlib.import_module(name)
    assert "probe_partial.loaded" not in sys.modules  # nothing half-loaded is left behind
    assert importlib.import_module("probe_fine").VALUE == 7
    assert "probe_not_installed" not in sys.modules
    assert hide_unloadable(names) == {}  # hidden once, then nothing more to do
