"""What reviews keep finding, checked on every run: the linter's pyflakes rules, the layers'
import contracts (format -> storage -> model -> fuse -> cli, no import going up; only the FUSE
layer and the command line import trio or pyfuse3), no module over 600 lines, and an import
inside a function only where a comment says why."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "h5fs"
LAYERS = ("format", "storage", "model", "fuse", "cli")
# modules beside the layers: what each may import, as the layer it belongs with
TOP_LEVEL = {"__init__": "format", "errors": "format", "logs": "format", "progress": "format", "spans": "format",
             "utab": "fuse", "mount_options": "fuse", "status": "fuse", "check": "cli", "mount_helper": "cli"}
ASYNC_LIBRARIES = ("trio", "pyfuse3")
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> tuple[str, ...]:
    return path.relative_to(PACKAGE).with_suffix("").parts


def _layer(parts: tuple[str, ...]) -> str:
    """The layer a module (its dotted parts under h5fs) belongs to."""
    if parts[0] in LAYERS:
        return parts[0]
    name = parts[0]
    if name not in TOP_LEVEL:
        raise AssertionError(f"h5fs/{name}.py: a top-level module not placed in a layer (TOP_LEVEL)")
    return TOP_LEVEL[name]


def _imported(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement of module `path` names (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not node.level:
        return [node.module or ""]
    parts = list(_dotted(path))
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
    return [".".join(["h5fs", *base, *([node.module] if node.module else [])])]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    return [(node.lineno, name) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for name in _imported(path, node)]


def test_no_import_goes_up_a_layer():
    """Type-checking imports included: a layer that names a type from above depends on it."""
    wrong = []
    for path in _modules():
        mine = LAYERS.index(_layer(_dotted(path)))
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[0] == "h5fs" and len(parts) > 1 and LAYERS.index(_layer(tuple(parts[1:]))) > mine:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not wrong, "imports that go up a layer:\n" + "\n".join(wrong)


def test_only_the_fuse_layer_and_the_command_line_use_trio_and_pyfuse3():
    wrong = [f"{path.relative_to(REPO)}:{line} imports {name}"
             for path in _modules() if _layer(_dotted(path)) not in ("fuse", "cli")
             for line, name in _imports(path) if name.split(".")[0] in ASYNC_LIBRARIES]
    assert not wrong, "\n".join(wrong)


def test_no_module_is_over_600_lines():
    long = [f"{p.relative_to(REPO)}: {n} lines" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, "\n".join(long)


def _says_why(lines: list[str], line: int) -> bool:
    """A comment on the import's line, or on the line above the block of imports it is in
    (a `try:   # why` included)."""
    i = line - 1
    while True:
        if "#" in lines[i]:
            return True
        above = lines[i - 1].strip()
        if not above.startswith(("import ", "from ")):
            return "#" in above
        i -= 1


def test_an_import_inside_a_function_says_why():
    """The reason (an optional or heavy dependency, a start-up kept light) is written where the
    import is; an import cycle is not a reason."""
    bare = []
    for path in _modules():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not _says_why(lines, node.lineno):
                    bare.append(f"{path.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bare, "imports inside functions without a comment saying why:\n" + "\n".join(bare)


def test_the_linter_passes():
    """ruff with pyflakes' rules (pyproject.toml), over the package, the tests and the scripts."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed (scripts/setup.sh installs the test dependencies)")
    done = subprocess.run([ruff, "check", "--output-format", "concise", "h5fs", "tests", "scripts"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_relative_imports_resolve_to_the_module_they_reach():
    """(Else the contract test above could pass on anything.)"""
    path = PACKAGE / "storage" / "index" / "example.py"
    tree = ast.parse("from ...model import file\nfrom . import btree\nfrom ..format import superblock\n"
                     "from ..readers.fixed_array import FixedArray\nimport trio\n")
    assert [_imported(path, node)[0] for node in tree.body] == [
        "h5fs.model", "h5fs.storage.index", "h5fs.storage.format", "h5fs.storage.readers.fixed_array", "trio"]
    assert [_layer(parts) for parts in (("model",), ("storage", "index", "example"), ("cli",), ("errors",))] == [
        "model", "storage", "cli", "format"]
