"""The official ColBench data path (sweet/colbench/official.py) on small local files in the exact official format.

tests/data/official/dataset/ mirrors the hub dataset's layout (backend_tasks/train.jsonl, backend_tasks/test.jsonl);
tests/data/official/offline.jsonl is an offline trajectory file as simulate_interactions.py writes it: 2 tasks x k=3,
laid out as 3 consecutive blocks of the same task list. Nothing here touches the network.
"""
import dataclasses
import hashlib
import json
import re
import shutil
import socket
from pathlib import Path

import pytest

from sweet.colbench import official
from sweet.colbench.backend import AGENT_PROMPT, LAST_TURN_NOTE
from sweet.colbench.official import (HUB_ID, load_official_tasks, needs_scoring, offline_task_id,
                                     read_offline_trajectories)
from sweet.sandbox import evaluate_many, run_calls
from sweet.colbench.sources import load_tasks
from sweet.store import loads, read_rows, write_rows

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "official"
DATASET = DATA / "dataset"
OFFLINE = DATA / "offline.jsonl"


def _jsonl(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    """Keep the `datasets` cache of these loads (and any cached hub copy) out of the user's own cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


@pytest.fixture
def no_network(monkeypatch):
    """Offline mode on, and any socket connection fails: a test using this can never reach the network."""
    import datasets
    import huggingface_hub.constants

    def refuse(*args, **kwargs):
        raise OSError("network access is disabled in this test")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# ---------------------------------------------------------------------------------------------------- fixtures

def test_fixture_references_pass_their_own_calls():
    recs = _jsonl(DATASET / "backend_tasks/train.jsonl") + _jsonl(DATASET / "backend_tasks/test.jsonl")
    recs += [r["task"] for r in _jsonl(OFFLINE)[:2]]
    assert len(recs) == 10
    for rec in recs:
        assert set(rec) == {"problem_description", "ground_truth", "test_cases"}  # the official record, no id/split
        assert isinstance(rec["test_cases"], dict)
        assert "The signature of the function is: def " in rec["problem_description"]
        results = run_calls(rec["ground_truth"], list(rec["test_cases"].values()))
        assert all(ok for ok, _ in results), (rec["ground_truth"], results)


def test_offline_fixture_follows_the_official_layout_and_rewards():
    recs = _jsonl(OFFLINE)
    n_tasks = len(recs) // 3
    for i in range(len(recs) - n_tasks):  # evaluate_code.py's check: row i and i + num_tasks share the task
        assert recs[i]["task"] == recs[i + n_tasks]["task"]
    for r in recs:
        assert r["dialogue_history"][0] == {"role": "user", "content": r["task"]["problem_description"]}
        assert all({"input", "output"} <= set(m) for m in r["dialogue_history"][1::2])
    # The stored rewards are what the sandbox gives the (fence-stripped) answers.
    _, rows = read_offline_trajectories(OFFLINE)
    reports = evaluate_many([(r["answer"], r["training_info"], list(rec["task"]["test_cases"].values()))
                             for r, rec in zip(rows, recs)], workers=2)
    assert len({r["task_id"] for r in rows}) == 2
    for r, rep in zip(rows, reports):
        if r["reward"] is not None:
            assert rep.reward == r["reward"] and rep.passed == r["tests_passed"]
        else:
            assert rep.reward == 1.0  # the unscored rows are correct answers


# ------------------------------------------------------------------------------------------------ task loading

def test_loads_the_local_copy_through_datasets(monkeypatch):
    import datasets

    calls = []
    real = datasets.load_dataset

    def spy(path, **kw):
        calls.append((path, kw["data_files"]))
        return real(path, **kw)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    tasks = load_official_tasks(str(DATASET))
    assert calls == [(str(DATASET), {"train": "backend_tasks/train.jsonl"}),
                     (str(DATASET), {"test": "backend_tasks/test.jsonl"})]
    assert [t.task_id for t in tasks] == [f"official-train-{i:05d}" for i in range(3)] + \
        [f"official-test-{i:05d}" for i in range(5)]
    assert [t.split for t in tasks] == ["train"] * 3 + ["test"] * 5
    recs = _jsonl(DATASET / "backend_tasks/train.jsonl") + _jsonl(DATASET / "backend_tasks/test.jsonl")
    for t, rec in zip(tasks, recs):
        assert (t.problem_description, t.ground_truth) == (rec["problem_description"], rec["ground_truth"])
        assert t.test_cases == list(rec["test_cases"].values())  # in file order


def test_first_n_and_ids_are_stable():
    full = load_official_tasks(str(DATASET), first_n_test=None)
    cut = load_official_tasks(str(DATASET), first_n_test=2, first_n_train=1)
    assert [t.task_id for t in cut] == ["official-train-00000", "official-test-00000", "official-test-00001"]
    by_id = {t.task_id: t for t in full}
    assert all(by_id[t.task_id] == t for t in cut)  # an id names the same task whichever rows are kept
    assert len([t for t in load_official_tasks(str(DATASET), first_n_test=1000) if t.split == "test"]) == 5
    assert [t.split for t in load_official_tasks(str(DATASET), splits=("test",), first_n_test=0)] == []
    assert {t.split for t in load_official_tasks(str(DATASET), splits=("test",))} == {"test"}
    with pytest.raises(ValueError, match="unknown split"):
        load_official_tasks(str(DATASET), splits=("dev",))
    with pytest.raises(ValueError, match="first_n_test"):
        load_official_tasks(str(DATASET), first_n_test=-1)


def test_flat_folder_and_load_tasks_sources(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for split in ("train", "test"):
        shutil.copy(DATASET / f"backend_tasks/{split}.jsonl", flat / f"{split}.jsonl")
    ref = load_official_tasks(str(DATASET))
    assert load_official_tasks(str(flat)) == ref
    assert load_tasks(f"official:{DATASET}") == ref  # first_n_test defaults to 1000
    assert load_tasks(f"hub:{DATASET}", first_n_test=2) == ref[:5]
    assert load_tasks(f"official:{flat}", first_n_test=1) == ref[:4]
    # A plain folder path keeps its former meaning: ids `<split>-<row>`, every row.
    assert [t.task_id for t in load_tasks(str(flat), first_n_test=1)] == \
        [f"train-{i}" for i in range(3)] + [f"test-{i}" for i in range(5)]
    assert len(load_tasks("bundled")) > 0
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_tasks(f"official:{tmp_path / 'missing'}")
    with pytest.raises(ValueError, match="name a folder"):
        load_tasks("official:")
    with pytest.raises(FileNotFoundError, match="neither backend_tasks/test.jsonl nor test.jsonl"):
        (tmp_path / "half").mkdir()
        _write(tmp_path / "half/train.jsonl", _jsonl(flat / "train.jsonl"))
        load_official_tasks(str(tmp_path / "half"))
    with pytest.raises(FileNotFoundError, match="not a hub dataset id"):
        load_official_tasks("./not/here")


def test_rows_with_different_test_names_keep_only_their_own(tmp_path):
    recs = _jsonl(DATASET / "backend_tasks/train.jsonl")
    recs[1]["test_cases"] = {"test1": recs[1]["test_cases"]["test1"]}  # a subset of the others' test names
    _write(tmp_path / "d/backend_tasks/train.jsonl", recs)
    _write(tmp_path / "d/backend_tasks/test.jsonl", _jsonl(DATASET / "backend_tasks/test.jsonl"))
    tasks = load_official_tasks(str(tmp_path / "d"))
    assert tasks[1].test_cases == [recs[1]["test_cases"]["test1"]]
    assert tasks[0].test_cases == list(recs[0]["test_cases"].values())


def test_hub_unreachable_gives_one_clear_error(no_network, tmp_path):
    for load in (lambda: load_official_tasks(HUB_ID, cache_dir=str(tmp_path / "cache")),
                 lambda: load_tasks(f"hub:{HUB_ID}")):
        with pytest.raises(RuntimeError) as e:
            load()
        msg = str(e.value)
        assert HUB_ID in msg and "hf download" in msg and "backend_tasks/test.jsonl" in msg
        assert "tasks.source" in msg and "official:" in msg


@pytest.mark.parametrize("change, field", [
    (lambda r: r.pop("ground_truth"), "missing field 'ground_truth'"),
    (lambda r: r.update(ground_truth=5), "field 'ground_truth' must be str, got int"),
    (lambda r: r.update(problem_description=None), "missing field 'problem_description'"),
    (lambda r: r.update(test_cases={}), "field 'test_cases' must be a non-empty"),
    (lambda r: r.update(test_cases={"test1": 3}), "field 'test_cases' must be a non-empty"),
    ("{not json", "not valid JSON"),
])
def test_bad_task_rows_name_file_row_and_field(tmp_path, change, field):
    recs = _jsonl(DATASET / "backend_tasks/test.jsonl")
    if isinstance(change, str):
        recs[1] = change
    else:
        change(recs[1])
    bad = _write(tmp_path / "d/backend_tasks/test.jsonl", recs)
    with pytest.raises(ValueError) as e:
        load_official_tasks(str(tmp_path / "d"), splits=("test",))
    assert str(e.value).startswith(f"{bad}: row 1: ") and field in str(e.value)
    if not isinstance(change, str):  # rows past first_n_test are not turned into tasks, so not checked either
        assert len(load_official_tasks(str(tmp_path / "d"), splits=("test",), first_n_test=1)) == 1


# ------------------------------------------------------------------------------------------ offline trajectories

def _episode_row_keys() -> list[str]:
    """The columns of a collected trajectory row (`sweet.records.Trajectory`), in order."""
    from sweet.records import Trajectory

    return [f.name for f in dataclasses.fields(Trajectory)]


def test_offline_import_tasks_and_rows(tmp_path):
    recs = _jsonl(OFFLINE)
    tasks, rows = read_offline_trajectories(OFFLINE)
    descs = [recs[0]["task"]["problem_description"], recs[1]["task"]["problem_description"]]
    assert [t.task_id for t in tasks] == ["off-" + hashlib.sha1(d.encode()).hexdigest()[:10] for d in descs]
    assert [t.task_id for t in tasks] == [offline_task_id(d) for d in descs]
    assert all(t.split == "train" for t in tasks)
    assert tasks[0].ground_truth == recs[0]["task"]["ground_truth"]
    assert tasks[0].test_cases == list(recs[0]["task"]["test_cases"].values())
    assert len(rows) == 6 and all(list(r) == _episode_row_keys() for r in rows)
    a, b = tasks[0].task_id, tasks[1].task_id
    assert [(r["task_id"], r["sample_idx"]) for r in rows] == [(a, 0), (b, 0), (a, 1), (b, 1), (a, 2), (b, 2)]
    assert [r["traj_id"] for r in rows] == [f"{r['task_id']}__{r['sample_idx']}" for r in rows]
    assert len({r["traj_id"] for r in rows}) == 6
    assert all(r["training_info"] == recs[i]["task"]["ground_truth"] and r["error"] is None
               and r["tests_total"] == 4 for i, r in enumerate(rows))
    # The rows go into the store as they are, unscored ones included.
    write_rows(rows, tmp_path / "trajectories.parquet")
    assert read_rows(tmp_path / "trajectories.parquet") == rows


def test_offline_messages_use_our_prompt_and_format():
    recs = _jsonl(OFFLINE)
    _, rows = read_offline_trajectories(OFFLINE)
    for r, rec in zip(rows, recs):
        msgs = loads(r["messages"])
        hist = rec["dialogue_history"]
        assert msgs[0] == {"role": "user", "content": AGENT_PROMPT.format(
            max_turns=10, problem=rec["task"]["problem_description"])}
        assert [set(m) for m in msgs] == [{"role", "content"}] * len(hist)  # no 'input'/'output'
        assert [m["role"] for m in msgs] == [m["role"] for m in hist]
        assert r["n_turns"] == sum(m["role"] == "assistant" for m in hist)
        if r["n_turns"] < 10:
            assert [m["content"] for m in msgs[1:]] == [m["content"] for m in hist[1:]]
    assert [r["n_turns"] for r in rows] == [3, 1, 2, 2, 10, 1]
    # The 10-turn dialogue: the reply before the last allowed turn carries our last-turn note, as in rollout().
    long = loads(rows[4]["messages"])
    assert long[-2]["content"] == recs[4]["dialogue_history"][-2]["content"] + LAST_TURN_NOTE
    assert sum(LAST_TURN_NOTE in m["content"] for m in long) == 1
    # Answers: the code of the record's answer, fences (and a prose preamble) stripped.
    assert rows[0]["answer"].startswith("def discounted_price(") and "```" not in rows[0]["answer"]
    assert rows[4]["answer"].startswith("def discounted_price(")  # unmarked last response at the turn limit
    assert rows[5]["answer"] == "def count_vowels(text, include_y)\n    return 0"


def test_offline_rewards_and_needs_scoring():
    _, rows = read_offline_trajectories(OFFLINE)
    assert [r["reward"] for r in rows] == [1.0, 0.75, 0.5, None, None, 0.0]
    assert [r["success"] for r in rows] == [True, False, False, None, None, False]
    assert [r["tests_passed"] for r in rows] == [4, 3, 2, None, None, 0]
    assert needs_scoring(rows) == [rows[3], rows[4]]


def test_offline_limit_keeps_whole_tasks():
    tasks, rows = read_offline_trajectories(OFFLINE, limit=1)
    assert len(tasks) == 1 and [r["sample_idx"] for r in rows] == [0, 1, 2]
    assert {r["task_id"] for r in rows} == {tasks[0].task_id}
    assert read_offline_trajectories(OFFLINE, limit=0) == ([], [])
    assert read_offline_trajectories(OFFLINE, limit=5) == read_offline_trajectories(OFFLINE)


def _hist(rec):
    return rec["dialogue_history"]


@pytest.mark.parametrize("change, field", [
    (lambda r: r.pop("task"), "missing field 'task'"),
    (lambda r: r.update(task="x"), "field 'task' must be an object"),
    (lambda r: r["task"].pop("ground_truth"), "missing field 'task.ground_truth'"),
    (lambda r: r["task"].update(test_cases=[]), "field 'task.test_cases' must be a non-empty"),
    (lambda r: r["task"].update(ground_truth="def other(): pass"), "field 'task': same problem_description as row 0"),
    (lambda r: r.pop("dialogue_history"), "missing field 'dialogue_history'"),
    (lambda r: r.update(dialogue_history={"role": "user"}), "field 'dialogue_history' must be a non-empty list"),
    (lambda r: r.update(dialogue_history=[]), "field 'dialogue_history' must be a non-empty list"),
    (lambda r: _hist(r)[1].pop("content"), "field 'dialogue_history[1].content' must be a string, got nothing"),
    (lambda r: _hist(r)[2].update(role=None), "field 'dialogue_history[2].role' must be a string, got NoneType"),
    (lambda r: _hist(r).__setitem__(1, "hi"), "field 'dialogue_history[1]' must be an object"),
    (lambda r: _hist(r)[1].update(role="user"), "field 'dialogue_history[1].role' is 'user', expected 'assistant'"),
    (lambda r: _hist(r).pop(), "field 'dialogue_history' must end with the agent's"),
    (lambda r: r.update(dialogue_history=_hist(r)[:1] + _hist(r)[1:3] * 10 + _hist(r)[-1:]),
     "field 'dialogue_history' has 11 assistant turns, more than max_turns=10"),
    (lambda r: r.pop("answer"), "missing field 'answer'"),
    (lambda r: r.update(answer=None), "field 'answer' must be str"),
    (lambda r: r.update(reward="high"), "field 'reward' must be a number between 0 and 1"),
    (lambda r: r.update(reward=1.5), "field 'reward' must be a number between 0 and 1"),
    (lambda r: r.update(reward=True), "field 'reward' must be a number between 0 and 1"),
])
def test_offline_bad_rows_name_file_row_and_field(tmp_path, change, field):
    recs = _jsonl(OFFLINE)
    change(recs[2])
    bad = _write(tmp_path / "offline.jsonl", recs)
    with pytest.raises(ValueError) as e:
        read_offline_trajectories(bad)
    assert str(e.value).startswith(f"{bad}: row 2: ") and field in str(e.value), str(e.value)


def test_offline_bad_json_and_missing_file(tmp_path):
    lines = OFFLINE.read_text(encoding="utf-8").splitlines()
    bad = _write(tmp_path / "offline.jsonl", lines[:3] + ['{"task": '] + lines[4:])
    with pytest.raises(ValueError, match="^" + re.escape(f"{bad}: row 3: not valid JSON")):
        read_offline_trajectories(bad)
    with pytest.raises(FileNotFoundError, match=official.OFFLINE_FILE):
        read_offline_trajectories(tmp_path / "missing.jsonl")


def test_offline_messages_kept_as_they_are_in_the_system_view():
    """agent_view='system' (the paper profiles'): the record's dialogue verbatim (its own first message, no last-turn
    note), after a system message holding this project's instructions."""
    from sweet.colbench.backend import opening

    recs = _jsonl(OFFLINE)
    _, rows = read_offline_trajectories(OFFLINE, agent_view="system")
    for r, rec in zip(rows, recs):
        msgs = loads(r["messages"])
        system = opening(AGENT_PROMPT, "system", max_turns=10, problem=rec["task"]["problem_description"])[0]
        assert msgs[0] == system and system["role"] == "system" and "{" not in system["content"]
        assert msgs[1:] == [{"role": m["role"], "content": m["content"]} for m in rec["dialogue_history"]]
    assert not any(LAST_TURN_NOTE in m["content"] for r in rows for m in loads(r["messages"]))
    with pytest.raises(ValueError, match="agent view"):
        read_offline_trajectories(OFFLINE, agent_view="assistant")
