"""Fixtures of the report's tests: a stored study shaped like the CPU demo's (see demo_like.py), and
headless Chromium with no network, to open the pages the reports write."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def _load_demo_like():
    """tests/sweeper/report/demo_like.py as a module (the tests are not a package)."""
    name = "sweeper_tests_report_demo_like"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("demo_like.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def demo_like():
    return _load_demo_like()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    # no network at all: every request goes to a proxy that is not there
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
]

Chromium = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    """``chromium(page, profile, *args)``: headless Chromium on ``page`` with no network (the test
    is skipped where it is not installed)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/install_chromium.sh)")

    def run(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                CHROMIUM,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--virtual-time-budget=20000",
                *args,
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    return run
