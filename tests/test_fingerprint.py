"""Stage code fingerprints come from each stage module's import closure inside sweet/, so they cannot go stale."""

import re
import shutil
from pathlib import Path

import pytest

from sweet import codehash
from sweet.cli import main
from sweet.stages import STAGES

LOADS_A_MODEL = {"collect_trajectories", "train_critic", "sample_and_rank_candidates", "train_actor", "evaluate"}
# (function edited, stages that must change, stages that must not): hard expectations on top of the closures.
EDITS = [
    ("token_logps", {"train_critic", "sample_and_rank_candidates", "train_actor", "evaluate"},
     {"generate_tasks", "build_preference_pairs"}),
    ("load_policy", {"sample_and_rank_candidates", "train_actor", "evaluate"}, {"build_preference_pairs"}),
    ("resolve_model", LOADS_A_MODEL, {"build_preference_pairs"}),
]


def _defining_file(func: str, root: Path = codehash.ROOT) -> Path:
    """The one file under `root` that defines `func` (found by text: the function may move between modules)."""
    hits = [p for p in sorted(root.rglob("*.py")) if re.search(rf"^def {func}\(", p.read_text(), re.M)]
    assert len(hits) == 1, f"{func} defined in {hits}"
    return hits[0]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _hashes(root: Path) -> dict[str, str]:
    return {s.name: codehash.code_version(s.fn.__module__, root) for s in STAGES}


def _reaching(entry: str, root: Path) -> set[str]:
    """The stages whose closure holds `entry` (a module name or an extra file's name)."""
    out = set()
    for s in STAGES:
        c = codehash.closure(s.fn.__module__, root)
        if entry in c.modules or entry in c.files:
            out.add(s.name)
    return out


def _append_comment(path: Path) -> None:
    with path.open("a") as fh:
        fh.write("\n# edited by a test\n")


@pytest.fixture
def tree(tmp_path) -> Path:
    """A private copy of the sweet/ package: the tests edit it, never the checkout."""
    root = tmp_path / "sweet"
    shutil.copytree(codehash.ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root.resolve()


@pytest.mark.parametrize("func,must_change,must_not", EDITS, ids=[e[0] for e in EDITS])
def test_editing_a_module_changes_exactly_the_stages_that_reach_it(tree, func, must_change, must_not):
    path = _defining_file(func, tree)
    module = _module_name(path, tree)
    expected = _reaching(module, tree)
    assert must_change <= expected and not must_not & expected
    before = _hashes(tree)
    _append_comment(path)
    after = _hashes(tree)
    assert {n for n in before if before[n] != after[n]} == expected


def test_files_run_by_path_and_packaged_data_count(tree):
    for name in ("sweet/sandbox/_child.py", "sweet/sandbox/_confine.py"):
        assert {"collect_trajectories", "evaluate"} <= _reaching(name, tree)
    before = _hashes(tree)
    _append_comment(tree / "sandbox" / "_child.py")
    after = _hashes(tree)
    assert {n for n in before if before[n] != after[n]} == _reaching("sweet/sandbox/_child.py", tree)
    assert before["build_preference_pairs"] == after["build_preference_pairs"]
    _append_comment(tree / "colbench" / "data" / "seeds.jsonl")
    again = _hashes(tree)
    assert again["generate_tasks"] != after["generate_tasks"]
    assert again["build_preference_pairs"] == after["build_preference_pairs"]


def test_evaluate_reaches_the_critic_the_policy_and_the_models():
    modules = codehash.closure("sweet.stages.evaluate").modules
    root = codehash.ROOT
    assert {"sweet.algos.critic", "sweet.models", _module_name(_defining_file("load_policy"), root),
            _module_name(_defining_file("token_logps"), root)} <= set(modules)


def test_a_copy_of_the_tree_has_the_same_closures(tree):
    for s in STAGES:
        here, there = codehash.closure(s.fn.__module__), codehash.closure(s.fn.__module__, tree)
        assert set(here.modules) == set(there.modules) and set(here.files) == set(there.files)
        assert all(str(p).startswith(str(tree)) for p in [*there.modules.values(), *there.files.values()])


def _write(root: Path, rel: str, text: str = "") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_closure_rules_on_a_small_tree(tmp_path):
    root = tmp_path / "pkg"
    _write(root, "__init__.py")
    _write(root, "a/__init__.py", "from pkg.a import heavy\n")     # runs, but is not followed: a.b does not use it
    _write(root, "a/heavy.py")
    _write(root, "a/b.py", "from . import c\nfrom ..d import f\nimport os\n\ndef g():\n    from pkg import e\n")
    _write(root, "a/c.py", "from pkg.util import x\n")              # util is a package and x one of its modules
    _write(root, "d.py", 'FINGERPRINT_FILES = ("run_me.py",)\n')
    _write(root, "run_me.py", "import pkg.h\n")                       # run by path: its imports count too
    _write(root, "e.py")
    _write(root, "h.py")
    _write(root, "util/__init__.py")
    _write(root, "util/x.py")
    _write(root, "util/data/table.jsonl", "{}\n")
    _write(root, "unused.py")
    c = codehash.closure("pkg.a.b", root)
    assert set(c.modules) == {"pkg", "pkg.a", "pkg.a.b", "pkg.a.c", "pkg.d", "pkg.e", "pkg.h", "pkg.util",
                              "pkg.util.x"}
    assert set(c.files) == {"pkg/run_me.py", "pkg/util/data/table.jsonl"}
    assert codehash.closure("pkg.a", root).modules.keys() == {"pkg", "pkg.a", "pkg.a.heavy"}


def test_a_declared_file_that_is_missing_is_an_error(tmp_path):
    root = tmp_path / "pkg"
    _write(root, "__init__.py")
    _write(root, "m.py", 'FINGERPRINT_FILES = ("gone.py",)\n')
    with pytest.raises(FileNotFoundError, match="gone.py"):
        codehash.closure("pkg.m", root)


def test_status_code_lists_each_stages_closure(capsys):
    assert main(["status", "--profile", "micro", "--code"]) == 0
    out = capsys.readouterr().out
    assert out.count("    code ") == len(STAGES)
    for entry in ("sweet.stages.evaluate", "sweet.algos.critic", "sweet.models", "sweet/sandbox/_child.py",
                  "sweet/colbench/data/seeds.jsonl"):
        assert f"      {entry}\n" in out


def test_the_dask_fan_out_keeps_the_collect_stages_fingerprint(monkeypatch):
    """`collect.shards>1` swaps the collect function for the fan-out wrapper (in tasks/, orchestration only): same
    code fingerprint, so the same folder and cache entry as a single-process run."""
    pytest.importorskip("prefect_dask")
    import tasks.collect as tc
    from sweet.config import load_config
    from sweet.pipeline import fingerprint
    from sweet.stages import COLLECT

    seen = []
    monkeypatch.setattr(tc, "run", lambda stage, cfg, *inputs, **kw: seen.append(stage) or "out")
    cfg = load_config("micro", ["collect.shards=2"])
    tc._collect_trajectories.fn(cfg, "artifacts/micro/generate_tasks/0123456789abcdef")
    assert seen[0].fn is tc.fan_out
    inputs = ("artifacts/micro/generate_tasks/0123456789abcdef",)
    assert fingerprint(seen[0], cfg, inputs) == fingerprint(COLLECT, cfg, inputs)


def test_a_llamacpp_run_without_llama_server_is_fingerprinted_as_transformers(monkeypatch):
    """tiny samples with llama.cpp where it is installed and falls back to transformers where it is not: the two
    machines' collections must not share a cache entry (installing llama-server later would otherwise turn
    transformers' episodes into hits for llama.cpp)."""
    from sweet import pipeline
    from sweet.config import load_config
    from sweet.stages import COLLECT

    cfg = load_config("tiny")
    assert cfg.engine.backend == "llamacpp"
    monkeypatch.setattr(pipeline, "server_binary", lambda: Path("/usr/bin/llama-server"))
    served = pipeline.config_slice(cfg, COLLECT.config_keys)
    monkeypatch.setattr(pipeline, "server_binary", lambda: None)
    fallback = pipeline.config_slice(cfg, COLLECT.config_keys)
    assert served["engine.backend"] == "llamacpp"
    assert fallback["engine.backend"].startswith("hf") and fallback != served
