"""A server venv from a manifest's ``dependencies``, created once and cached by their hash.

The challenge harness installs a submission's ``dependencies`` into a fresh
virtual environment and runs its ``python serve.py`` there; a challenge
manifest pins its own vLLM build that way. ``server_venv(manifest)`` does the
same: the venv lives in ``<cache>/<key>`` where the key is a hash of the
dependency list and the base interpreter's version, so the same list is
installed once and reused by every later run. The venv is built in a
temporary folder beside the cache entry and renamed into place only when
the install succeeded, so a failed install leaves nothing that a later run
would take for a finished venv.

The cache is ``$SWEEPER_VENV_CACHE`` if set, else
``$XDG_CACHE_HOME/sweeper/venvs`` (``~/.cache/sweeper/venvs``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sweeper.errors import UserInputError

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "SWEEPER_VENV_CACHE"
MARKER = "sweeper-venv.json"  # written last: its presence means "installed"
OUTPUT_TAIL_LINES = 15


class ServerVenvError(UserInputError):
    """The manifest's dependencies could not be installed into a server venv."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerVenv:
    """A cached server venv: its folder, its interpreter, the key it is cached under."""

    path: Path
    key: str
    dependencies: tuple[str, ...]
    created: bool  # False: an existing cache entry was reused

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def venv_cache_root() -> Path:
    """Where server venvs are cached (``$SWEEPER_VENV_CACHE``, else the user cache folder)."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "sweeper" / "venvs"


def dependencies_key(dependencies: Sequence[str], *, python: str | os.PathLike[str] | None = None) -> str:
    """The cache key: a hash of the dependency list (in its order) and the base Python version."""
    interpreter = str(python or sys.executable)
    version = _python_version(interpreter)
    text = json.dumps({"dependencies": list(dependencies), "python": version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def server_venv(
    dependencies: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    cache_root: str | os.PathLike[str] | None = None,
    python: str | os.PathLike[str] | None = None,
) -> ServerVenv:
    """The cached venv with ``dependencies`` installed: reused if present, else created.

    ``cwd``: the folder pip runs in (the manifest's: relative paths in the
    dependency list are relative to it). ``python``: the interpreter the
    venv is made from (default: this one's base). Raises ServerVenvError
    (pip's last lines included) when the venv cannot be made or the install
    fails; the cache is then as it was.
    """
    dependencies = tuple(dependencies)
    if not dependencies:
        raise ServerVenvError("the manifest lists no dependencies: there is nothing to install")
    base = str(python or sys.executable)
    key = dependencies_key(dependencies, python=base)
    root = Path(cache_root).expanduser() if cache_root is not None else venv_cache_root()
    final = root / key
    if (final / MARKER).is_file() and (final / "bin" / "python").exists():
        logger.info("reusing the server venv %s (%d dependencies)", final, len(dependencies))
        return ServerVenv(path=final, key=key, dependencies=dependencies, created=False)
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{key}-building-", dir=root))
    try:
        logger.info("creating the server venv %s: installing %s", final, " ".join(dependencies))
        _run([base, "-m", "venv", str(building)], "creating the venv", cwd=cwd)
        _run(
            [
                str(building / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                *dependencies,
            ],
            f"pip install {' '.join(dependencies)}",
            cwd=cwd,
        )
        (building / MARKER).write_text(
            json.dumps({"key": key, "dependencies": list(dependencies), "python": base}, indent=1) + "\n"
        )
        if final.exists():  # a half-made entry of an older sweeper, or another run was faster
            if (final / MARKER).is_file():
                shutil.rmtree(building, ignore_errors=True)
                return ServerVenv(path=final, key=key, dependencies=dependencies, created=False)
            shutil.rmtree(final)
        _relocate(building, final)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    logger.info("server venv ready: %s", final / "bin" / "python")
    return ServerVenv(path=final, key=key, dependencies=dependencies, created=True)


def _relocate(building: Path, final: Path) -> None:
    """Rename the finished venv into place and fix the paths venv and pip wrote into it."""
    os.rename(building, final)
    old, new = str(building), str(final)
    for path in [final / "pyvenv.cfg", *(final / "bin").iterdir()]:
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a binary
        if old in text:
            path.write_text(text.replace(old, new), encoding="utf-8")


def _run(command: list[str], what: str, *, cwd: str | os.PathLike[str] | None) -> None:
    try:
        completed = subprocess.run(  # noqa: S603 - the manifest's own dependency list
            command, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise ServerVenvError(f"{what}: cannot run {command[0]} ({exc})") from None
    if completed.returncode != 0:
        output = (completed.stderr or completed.stdout).strip().splitlines()
        tail = " | ".join(line.strip() for line in output[-OUTPUT_TAIL_LINES:] if line.strip())
        raise ServerVenvError(f"{what} failed (exit code {completed.returncode}); nothing was cached: {tail}")


def _python_version(interpreter: str) -> str:
    if Path(interpreter).absolute() == Path(sys.executable).absolute():
        return ".".join(map(str, sys.version_info[:3]))
    try:
        completed = subprocess.run(  # noqa: S603
            [interpreter, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ServerVenvError(f"{interpreter}: cannot run it as a Python interpreter ({exc})") from None
    return completed.stdout.strip()
