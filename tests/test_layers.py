"""The import graph of sweet/, tasks/ and flows/, read from the source (AST, nothing imported): every import
points down the layer order written in `sweet/__init__.py`, there are no cycles, no module takes another module's
private name, and Prefect is imported only by tasks/ and flows/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sweet

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sweet", "tasks", "flows")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


MODULES = _modules()


def _imports(name: str, path: Path):
    """(imported module, imported name or None, line) for every project import of `name`, lazy ones included."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                yield (full, None, node.lineno) if full in MODULES else (base, a.name, node.lineno)


def _owner(module: str) -> str | None:
    """The project module an import refers to (the longest known prefix), or None for third-party code."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULES:
            return ".".join(parts[:i])
    return None


def _layer(module: str) -> int:
    best = None
    for rank, (_, prefixes) in enumerate(sweet.LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                if best is None or len(p) > best[1]:
                    best = (rank, len(p))
    if best is None:
        raise AssertionError(f"{module} belongs to no layer of sweet.LAYERS: add it there")
    return best[0]


def _edges():
    for name, path in MODULES.items():
        for target, imported, line in _imports(name, path):
            yield name, path, target, imported, line


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer(name)


def test_imports_point_down_the_layers():
    up = []
    for name, path, target, _, line in _edges():
        owner = _owner(target)
        if owner is not None and _layer(owner) > _layer(name):
            up.append(f"{path.relative_to(ROOT)}:{line}: {name} ({sweet.LAYERS[_layer(name)][0]}) imports {owner} "
                      f"({sweet.LAYERS[_layer(owner)][0]})")
    assert not up, "imports that point up:\n" + "\n".join(up)


def test_no_private_names_cross_modules():
    bad = []
    for name, path, target, imported, line in _edges():
        owner = _owner(target)
        if owner is None:
            continue
        leaf = owner.rsplit(".", 1)[-1]
        private_module_of_my_package = leaf.startswith("_") and owner.rsplit(".", 1)[0] in (name, name.rsplit(".", 1)[0])
        if imported is not None and imported.startswith("_") and not imported.startswith("__") \
                and not private_module_of_my_package:
            bad.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {owner}.{imported}")
        if imported is None and leaf.startswith("_") and owner != name and not private_module_of_my_package:
            bad.append(f"{path.relative_to(ROOT)}:{line}: {name} imports the private module {owner}")
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {n: set() for n in MODULES}
    for name, _, target, _, _ in _edges():
        owner = _owner(target)
        if owner is not None and owner != name:
            graph[name].add(owner)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_prefect_only_in_tasks_and_flows():
    bad = [f"{path.relative_to(ROOT)}:{line}: {name} imports {target}" for name, path, target, _, line in _edges()
           if target.split(".")[0] == "prefect" and name.split(".")[0] == "sweet"]
    assert not bad, "sweet/ must not import Prefect:\n" + "\n".join(bad)


@pytest.mark.parametrize("name, parent", [("sweet.stages.collect", "sweet.stages"), ("sweet.agents.hf", "sweet.agents")])
def test_layers_resolve_by_longest_prefix(name, parent):
    assert _layer(name) == _layer(parent)
