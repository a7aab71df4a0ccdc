"""A stage's code version: the hash of every file inside `sweet/` its module can reach.

The closure is static (the source is parsed with `ast`, never imported), transitive, and errs on the side of too
much (a spurious rerun is cheap, a stale cache hit is wrong):
- every `import sweet.x`, `from sweet.x import y` (`sweet.x.y` too when that is a module) and relative import
  counts, wherever it sits (imports inside functions run later, but they run);
  `from sweet.a import b` where every name is a submodule does not count as importing the package `sweet.a`;
- importing `sweet.a.b` runs `sweet/a/__init__.py`, so that file is hashed too; its own imports are followed only
  when the package itself is imported (`from sweet.a import f`): otherwise `sweet/stages/__init__.py`, which
  imports every stage, would tie each stage to all the others;
- files that are run or read by path rather than imported count too, by one of two explicit rules:
  a module-level `FINGERPRINT_FILES = ("_child.py", ...)` (string literals, relative to the module's folder; a
  listed `.py` file's imports are followed as well), and every file under the `data/` folder of a reached package
  (packaged data read with importlib.resources, e.g. `sweet/colbench/data/*.jsonl`).
The hash is sha256 over the sorted (name, bytes) pairs; a name is the dotted module name, or for an extra file its
path from the package's parent (`sweet/sandbox/_child.py`), so a copy of the tree elsewhere hashes the same.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent  # the `sweet/` package folder
EXTRA_FILES_NAME = "FINGERPRINT_FILES"
DATA_DIR = "data"


@dataclass(frozen=True)
class Closure:
    modules: dict[str, Path]   # dotted name -> source file, every module of the closure
    files: dict[str, Path]     # 'sweet/sub/file' -> path, every extra file (run by path, or packaged data)

    def entries(self) -> list[tuple[str, Path]]:
        return sorted({**self.modules, **self.files}.items())


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The source of module `name` under `root` (`sweet.a.b` -> root/a/b.py or root/a/b/__init__.py), if any."""
    parts = name.split(".")
    if parts[0] != root.name:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py") if len(parts) > 1 else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported(tree: ast.AST, package: str, root: Path) -> set[str]:
    """Every module under `root` that `tree` imports, anywhere in it (lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from .. import x` goes up level-1 packages from this module's package
                up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{up}.{node.module}" if node.module else up
            else:
                base = node.module or ""
            subs = {f"{base}.{alias.name}" for alias in node.names}
            found.update(subs)  # kept only where they are modules
            if not all(module_file(n, root) for n in subs):  # a name defined in `base` itself
                found.add(base)
    return {n for n in found if module_file(n, root) is not None}


def _extra_files(tree: ast.Module, folder: Path) -> list[Path]:
    """The files a module declares in a top-level `FINGERPRINT_FILES = (...)` of string literals."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == EXTRA_FILES_NAME for t in targets):
                for elt in ast.literal_eval(node.value):
                    path = folder / elt
                    if not path.is_file():  # a declared file that is gone would silently stop counting
                        raise FileNotFoundError(f"{EXTRA_FILES_NAME} of {folder}: {elt} not found")
                    out.append(path)
    return out


def _data_files(package_dir: Path) -> list[Path]:
    data = package_dir / DATA_DIR
    if not data.is_dir():
        return []
    return [p for p in data.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def _outside_source(module: str) -> Path:
    """The file of a root module that is not under `root` (e.g. a test's stage function)."""
    mod = sys.modules.get(module)
    origin = getattr(mod, "__file__", None) if mod else None
    if origin is None:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec else None
    if origin is None:
        raise ImportError(f"stage code module {module!r} not found")
    return Path(origin)


@functools.lru_cache(maxsize=None)
def closure(module: str, root: Path = ROOT) -> Closure:
    """Every module and extra file under `root` that `module` reaches (cached per process; bytes are reread)."""
    root = Path(root).resolve()
    modules: dict[str, Path] = {}
    files: dict[str, Path] = {}
    followed: set[str] = set()
    todo = [(module, module_file(module, root) or _outside_source(module), True)]  # (name, file, follow imports)
    while todo:
        name, path, follow = todo.pop()
        if name in followed or (not follow and name in modules):
            continue
        modules[name] = path
        parts = name.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a/ and a/b/__init__
        todo += [(p, module_file(p, root), False) for p in parents if module_file(p, root)]
        if path.name == "__init__.py" and parts[0] == root.name:
            files.update((_rel(p, root), p) for p in _data_files(path.parent))
        if not follow:
            continue
        followed.add(name)
        tree = ast.parse(path.read_bytes(), filename=str(path))
        package = _package_of(name, path)
        trees = [tree]
        for extra in _extra_files(tree, path.parent):
            files[_rel(extra, root)] = extra
            if extra.suffix == ".py":  # run by path, but what it imports runs too
                trees.append(ast.parse(extra.read_bytes(), filename=str(extra)))
        todo += [(dep, module_file(dep, root), True) for t in trees for dep in _imported(t, package, root)]
    return Closure(modules, files)


def _rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.parent).as_posix()


def code_version(module: str, root: Path = ROOT) -> str:
    """The hash of `module`'s closure: the files' current bytes (the closure itself is cached per process)."""
    h = hashlib.sha256()
    for name, path in closure(module, Path(root).resolve()).entries():
        data = path.read_bytes()
        for part in (name.encode(), str(len(data)).encode(), data):
            h.update(part + b"\0")
    return h.hexdigest()[:16]
