"""The demo's files are defaults of the commands (``sweeper.cli``, ``sweeper.sweep``), not of the
core: ``sweeper.study``, ``sweeper.measure`` and ``sweeper.answer`` import nothing of
``sweeper.demo``, not even inside a function (docs/architecture.md, "Layers")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ("study", "measure", "answer")


def demo_imports(path: Path) -> list[int]:
    """The lines of ``path`` that import ``sweeper.demo`` (anywhere in the module)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(name == "sweeper.demo" or name.startswith("sweeper.demo.") for name in names):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("package", CORE)
def test_the_core_packages_import_nothing_of_the_demo(package: str) -> None:
    files = sorted((ROOT / "sweeper" / package).rglob("*.py"))
    assert files
    found = [f"{path.relative_to(ROOT)}:{line}" for path in files for line in demo_imports(path)]
    assert not found, "imports of sweeper.demo: " + ", ".join(found)


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from sweeper.demo import demo_paths\n    import sweeper.demo\n")
    assert demo_imports(module) == [2, 3]


def test_importing_the_core_packages_loads_no_demo() -> None:
    code = "import sys, sweeper.study, sweeper.measure, sweeper.answer; print('sweeper.demo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "False"
