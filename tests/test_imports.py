"""The import graph of the product: no cycles (imports inside functions count) and the lower
packages stand on nothing of ``sweeper``.

Every module of the product packages is read with ``ast`` (nothing is imported), each
``import``/``from ... import`` anywhere in it (module level, in functions, under
``TYPE_CHECKING``) becomes an edge to the product module it names, and the graph is
searched for cycles. ``from package import name`` points at ``package.name`` when that is
a module, else at ``package`` itself; importing ``package.sub`` also runs ``package``'s
``__init__``, but that edge is left out: a package's ``__init__`` re-exporting its own
modules is how the packages are built, not a cycle between two of them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("sweeper", "evaluators", "storage", "search_spaces")
LOWER = ("evaluators", "storage", "search_spaces")


def module_files() -> dict[str, Path]:
    """Every product module by dotted name (``pkg/__init__.py`` is ``pkg``)."""
    modules = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules that module ``name`` imports, anywhere in its text."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in modules else target)
    edges = set()
    for target in found:
        while target and target not in modules:  # ``import a.b.c`` of a name inside a.b
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):
            edges.add(target)
    return edges


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_names(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_one_cycle(graph, set(component)) for component in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module of ``component``, as a path that returns to it."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def test_the_graph_sees_imports_inside_functions_and_relative_ones() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    modules = module_files()
    assert "sweeper.errors" in modules and "evaluators.intervals" in modules
    # a function-level import is an edge as much as a module-level one
    assert "evaluators.intervals" in import_graph()["sweeper.study._window_readings"]


def test_no_two_product_modules_import_each_other() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("package", LOWER)
def test_the_lower_packages_import_nothing_of_sweeper(package: str) -> None:
    graph = import_graph()
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name == package or name.startswith(package + ".")
        for target in targets
        if target == "sweeper" or target.startswith("sweeper.")
    )
    assert not upward, f"{package} imports sweeper: " + ", ".join(upward)


@pytest.mark.parametrize("package", LOWER)
def test_the_lower_packages_import_nothing_of_each_other(package: str) -> None:
    graph = import_graph()
    others = [other for other in LOWER if other != package]
    sideways = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name == package or name.startswith(package + ".")
        for target in targets
        if any(target == other or target.startswith(other + ".") for other in others)
    )
    assert not sideways, f"{package} imports another lower package: " + ", ".join(sideways)


@pytest.mark.parametrize("package", LOWER)
def test_a_lower_errors_module_imports_nothing_of_the_project(package: str) -> None:
    assert not import_graph()[f"{package}.errors"]


def test_sweeper_errors_imports_only_the_lower_errors_modules() -> None:
    assert import_graph()["sweeper.errors"] == {f"{package}.errors" for package in LOWER}


def test_the_lower_packages_raise_errors_the_cli_catches() -> None:
    import sweeper.errors as errors
    from evaluators import intervals
    from search_spaces import _loader
    from storage import _engine, _queries

    # the classes the lower packages raise are the very classes sweeper.errors names
    assert intervals.MeasurementError is errors.MeasurementError
    assert _loader.SearchSpaceError is errors.SearchSpaceError
    assert _queries.StorageError is errors.StorageError
    # each sits under one of the roots the CLI catches, with the exit code the CLI gives it
    codes = {
        errors.SearchSpaceError: 2,
        errors.DataError: 2,
        errors.ManifestError: 2,
        _engine.StorageUrlError: 2,
        _queries.StudyNotFoundError: 2,
        errors.MeasurementError: 1,
        errors.StorageError: 1,
        errors.StudyError: 1,
        errors.ServerError: 1,
    }
    for cls, code in codes.items():
        assert issubclass(cls, errors.ERROR_ROOTS) and cls.exit_code == code, cls
    for root in errors.ERROR_ROOTS:
        assert root.exit_code in (1, 2) and not issubclass(root, tuple(set(errors.ERROR_ROOTS) - {root})), root
    # the user-input groups: never retried, whichever package raised them
    for cls in (errors.DataError, errors.SearchSpaceError, errors.ManifestError):
        assert issubclass(cls, errors.USER_INPUT_ERRORS) and cls.exit_code == 2, cls
    assert not issubclass(errors.MeasurementError, errors.USER_INPUT_ERRORS)
    with pytest.raises(errors.ERROR_ROOTS, match="at least 2 repeats"):
        intervals.repeat_interval([1.0])


def test_a_lower_package_user_error_is_one_line_and_exit_code_2(monkeypatch, capsys) -> None:
    from evaluators.errors import DataError
    from sweeper import cli

    def refuse(**_: object) -> None:
        raise DataError("prompts.json:\n  record 3 has no prompt")

    monkeypatch.setattr(cli.app, "main", refuse)
    monkeypatch.setattr("sys.argv", ["sweeper", "eval"])
    monkeypatch.delenv("SWEEPER_DEBUG", raising=False)
    with pytest.raises(SystemExit) as caught:
        cli.main()
    assert caught.value.code == 2
    assert capsys.readouterr().err == "error: prompts.json: record 3 has no prompt\n"
