"""No import cycle among h5fs.model modules, imports inside functions counted (an import inside a
function must not dodge one); imports for type hints only, under TYPE_CHECKING, are not run."""

from __future__ import annotations

import ast
from conftest import REPO

MODEL = REPO / "h5fs" / "model"


def _run_imports(tree: ast.AST) -> list[ast.ImportFrom]:
    """The relative imports the module runs, at any depth (TYPE_CHECKING blocks left out)."""
    found = []
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        if isinstance(child, ast.ImportFrom) and child.level == 1:
            found.append(child)
        found += _run_imports(child)
    return found


def _targets(node: ast.ImportFrom, names: set[str]) -> set[str]:
    """The h5fs.model modules `from .x import ...` or `from . import x, y` loads."""
    if node.module is None:
        return {a.name for a in node.names} & names
    return {node.module.split(".")[0]} & names


def _graph() -> dict[str, set[str]]:
    trees = {path.stem: ast.parse(path.read_text()) for path in sorted(MODEL.glob("*.py"))}
    names = set(trees)
    return {name: set().union(*(_targets(node, names) for node in _run_imports(tree)))
            for name, tree in trees.items()}


def test_no_import_cycle_among_model_modules():
    graph = _graph()
    assert {"file", "dataset", "virtual"} <= graph.keys() and "dataset" in graph["file"]
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("model import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name not in done:
            for target in sorted(graph[name]):
                visit(target, path + [name])
            done.add(name)

    for name in sorted(graph):
        visit(name, [])
