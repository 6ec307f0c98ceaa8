"""The command line's shape: a command calls the layers below and the CLI's private views,
never another command, and the package's ``__init__`` only re-exports (issue 49)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sweeper.cli import COMMAND_MODULES

CLI = Path(__file__).resolve().parents[3] / "sweeper" / "cli"


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("name", sorted(COMMAND_MODULES))
def test_a_command_imports_no_other_command(name: str) -> None:
    module = COMMAND_MODULES[name]
    commands = set(COMMAND_MODULES.values()) - {module}
    path = CLI / f"{module.rpartition('.')[2]}.py"
    assert not imported_modules(path) & commands


def test_every_command_module_is_listed_and_no_view_is_a_command() -> None:
    on_disk = {f"sweeper.cli.{path.stem}" for path in CLI.glob("*_cmd.py")}
    assert on_disk == set(COMMAND_MODULES.values())
    for path in CLI.glob("_*.py"):
        if path.name not in ("__init__.py", "_app.py"):  # _app.py: the group itself; a view defines no command
            assert "@click.command" not in path.read_text() and "@click.group" not in path.read_text(), path


def test_the_package_init_only_re_exports() -> None:
    tree = ast.parse((CLI / "__init__.py").read_text())
    docstring, *rest = tree.body
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    for node in rest:
        is_all = isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]
        assert isinstance(node, ast.ImportFrom) or is_all, ast.dump(node)
