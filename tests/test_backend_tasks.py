"""Checks on the bundled offline ColBench backend task set (sweet/colbench/data/backend_tasks.jsonl).

Reference and mutant code is only ever executed in child processes (never in the pytest process); everything
checked in-process is done on the source text and its AST.
"""
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASKS_PATH = ROOT / "sweet/colbench/data/backend_tasks.jsonl"
MUTANTS_PATH = Path(__file__).resolve().parent / "data/backend_mutants.jsonl"

ALLOWED_IMPORTS = {"math", "re", "collections", "itertools", "string"}
FORBIDDEN_NAMES = {"open", "exec", "eval", "compile", "__import__", "input", "print", "globals", "locals",
                   "vars", "getattr", "setattr", "delattr", "breakpoint", "exit", "quit"}
SIG_RE = re.compile(r"The signature of the function is: (def (\w+)\((.*)\))\s*\Z")


def _load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


TASKS = _load(TASKS_PATH)
MUTANTS = {m["task_id"]: m["mutant"] for m in _load(MUTANTS_PATH)}
IDS = [t["task_id"] for t in TASKS]
BY_ID = {t["task_id"]: t for t in TASKS}

# Child-side runner: exec each snippet in a fresh namespace, evaluate its calls, report repr() of each result.
_RUNNER = r'''
import json, sys

def plain(v, depth=0):
    if depth > 50:
        return False
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(plain(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(plain(k, depth + 1) and plain(x, depth + 1) for k, x in v.items())
    return False

jobs = json.load(sys.stdin)
out = {}
for job in jobs:
    ns = {"__name__": "colbench_ref"}
    rows = []
    try:
        exec(job["code"], ns)
        err = None
    except BaseException as e:
        err = "exec: %s: %s" % (type(e).__name__, e)
    for call in job["calls"]:
        if err:
            rows.append({"ok": False, "error": err})
            continue
        try:
            v = eval(call, ns)
            rows.append({"ok": True, "repr": repr(v), "plain": plain(v)})
        except BaseException as e:
            rows.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    out[job["id"]] = rows
sys.stdout.write(json.dumps(out))
'''


def _run_child(jobs, tmp_path, hash_seed):
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-s", "-c", _RUNNER], input=json.dumps(jobs), capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _calls(task):
    return list(task["test_cases"].values())


@pytest.fixture(scope="module")
def ref_results(tmp_path_factory):
    """References run twice, in two child processes with different hash seeds (catches set-order dependence)."""
    jobs = [{"id": t["task_id"], "code": t["ground_truth"], "calls": _calls(t)} for t in TASKS]
    first = _run_child(jobs, tmp_path_factory.mktemp("ref1"), 1)
    second = _run_child(jobs, tmp_path_factory.mktemp("ref2"), 12345)
    return first, second


@pytest.fixture(scope="module")
def mutant_results(tmp_path_factory):
    jobs = [{"id": tid, "code": MUTANTS[tid], "calls": _calls(BY_ID[tid])} for tid in IDS if tid in MUTANTS]
    return _run_child(jobs, tmp_path_factory.mktemp("mut"), 1)


def _function_def(source):
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(defs) == 1, "expected exactly one top-level function"
    others = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    assert not others, f"unexpected top-level statements: {[type(n).__name__ for n in others]}"
    return tree, defs[0]


# ---------------------------------------------------------------------------------------------- file-level


def test_ids_splits_and_counts():
    assert len(IDS) == len(set(IDS)), "duplicate task ids"
    assert all(re.fullmatch(r"bk-\d{3}", i) for i in IDS)
    splits = [t["split"] for t in TASKS]
    assert set(splits) <= {"train", "test"}
    assert splits.count("test") >= 30
    assert splits.count("train") >= 40
    names = [_function_def(t["ground_truth"])[1].name for t in TASKS]
    assert len(names) == len(set(names)), "function names should be unique across tasks"


def test_every_task_has_one_mutant():
    assert sorted(MUTANTS) == sorted(IDS)
    assert len(_load(MUTANTS_PATH)) == len(IDS)


# ---------------------------------------------------------------------------------------------- per task


@pytest.mark.parametrize("tid", IDS)
def test_record_shape(tid):
    t = BY_ID[tid]
    assert set(t) == {"task_id", "split", "problem_description", "ground_truth", "test_cases"}
    assert list(t["test_cases"]) == [f"test_case_{k}" for k in range(1, 11)]
    calls = _calls(t)
    assert len(set(calls)) == 10, "test cases must be distinct"

    tree, fn = _function_def(t["ground_truth"])
    lines = [ln for ln in t["ground_truth"].splitlines() if ln.strip()]
    assert 4 <= len(lines) <= 20

    m = SIG_RE.search(t["problem_description"])
    assert m, "description must end with the signature line"
    assert m.group(2) == fn.name
    assert [a.strip() for a in m.group(3).split(",") if a.strip()] == [a.arg for a in fn.args.args]
    assert len(t["problem_description"]) > len(m.group(0)) + 40, "description needs a real task statement"

    for call in calls:
        node = ast.parse(call, mode="eval").body
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn.name, call
        for arg in list(node.args) + [k.value for k in node.keywords]:
            bad = [n for n in ast.walk(arg) if isinstance(n, (ast.Name, ast.Call, ast.Attribute, ast.Lambda,
                                                                 ast.comprehension, ast.NamedExpr, ast.Subscript))]
            assert not bad, f"non-literal argument in {call}"


@pytest.mark.parametrize("tid", IDS)
def test_reference_is_plain_stdlib(tid):
    tree, _ = _function_def(BY_ID[tid]["ground_truth"])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert {a.name.split(".")[0] for a in node.names} <= ALLOWED_IMPORTS
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] in ALLOWED_IMPORTS
        elif isinstance(node, ast.Name):
            assert node.id not in FORBIDDEN_NAMES, node.id
        elif isinstance(node, ast.Attribute):
            assert not node.attr.startswith("__"), node.attr


@pytest.mark.parametrize("tid", IDS)
def test_reference_runs_and_is_deterministic(tid, ref_results):
    first, second = ref_results
    calls = _calls(BY_ID[tid])
    for call, a, b in zip(calls, first[tid], second[tid]):
        assert a["ok"], f"{call}: {a['error']}"
        assert a["plain"], f"{call} returned a non-plain value: {a['repr']}"
        assert a == b, f"{call} is not deterministic: {a['repr']} vs {b['repr']}"
    assert len(first[tid]) == 10


@pytest.mark.parametrize("tid", IDS)
def test_mutant_is_caught(tid, ref_results, mutant_results):
    _, mut_fn = _function_def(MUTANTS[tid])
    _, ref_fn = _function_def(BY_ID[tid]["ground_truth"])
    assert mut_fn.name == ref_fn.name
    ref = ref_results[0][tid]
    mut = mutant_results[tid]
    assert not any(m.get("error", "").startswith("exec:") for m in mut), "the mutant does not even define"
    differing = [c for c, r, m in zip(_calls(BY_ID[tid]), ref, mut) if r != m]
    assert differing, "the mutant passes every test case: the tests do not pin the hidden rule"
