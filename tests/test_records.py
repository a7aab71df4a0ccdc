"""The store's row types (`sweet.records`) against the README's store table and the Parquet files written from
them, and the task-family registry (`sweet.colbench.registry`) the stages go through."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sweet.colbench.backend import Episode
from sweet.colbench.frontend import FrontendEnv, FrontendEpisode
from sweet.colbench.frontend_tasks import FrontendTask
from sweet.colbench.registry import FAMILIES, family
from sweet.colbench.tasks import Task
from sweet.config import load_config
from sweet.records import RECORDS, EvalResult, Trajectory, Turn, turns_of
from sweet.store import TABLES, dumps, write_rows

ROOT = Path(__file__).resolve().parents[1]
TASK = Task("t/1", "train", "Add.\n\nThe signature of the function is: def add(a, b)",
            "def add(a, b):\n    return a + b", ["add(1, 2)", "add(2, 3)"])
PAGE = FrontendTask("p1", "test", "A bakery page.", "<html><body><h1>Crumb</h1></body></html>")


def _split_columns(cell: str) -> list[str]:
    """'a, b (x, y), c' -> ['a', 'b (x, y)', 'c']: commas inside parentheses or backticks do not split."""
    items, depth, tick, cur = [], 0, False, ""
    for ch in cell:
        tick ^= ch == "`"
        depth += (ch == "(") - (ch == ")") if not tick else 0
        if ch == "," and depth == 0 and not tick:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return items + [cur.strip()]


def readme_tables() -> dict[str, list[str]]:
    """The README's "The store" table: table -> column names in order (`the `X` columns` expands to X's)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The store"):]
    section = section[section.index("| table | columns |"):]
    tables: dict[str, list[str]] = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, cell = (c.strip() for c in line.strip().strip("|").split("|", 1))
        cols: list[str] = []
        for item in _split_columns(cell.rstrip("|").strip()):
            ref = re.fullmatch(r"the `(\w+)` columns", item)
            cols += tables[ref.group(1)] if ref else [re.match(r"\w+", item).group(0)]
        tables[name.strip("`")] = cols
    return tables


def _fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_readme_store_table_matches_the_records():
    readme = readme_tables()
    assert list(readme) == list(TABLES), "one README row per store table, in the catalog's order"
    assert set(RECORDS) == set(TABLES) - {"tasks"}
    for table, cls in RECORDS.items():
        assert readme[table] == _fields(cls), table
    # tasks are the environments' own types: the backend's columns; a frontend task's are the first four of them.
    assert readme["tasks"] == _fields(Task) and _fields(FrontendTask) == _fields(Task)[:4]


def test_eval_results_are_trajectories_then_method_and_mode():
    assert _fields(EvalResult) == _fields(Trajectory) + ["method", "mode", "values_stated"]


def _finished_episode() -> Episode:
    e = Episode(TASK, 2, 3)
    e.messages += [{"role": "assistant", "content": "Any rules?"}, {"role": "user", "content": "No."},
                   {"role": "assistant", "content": "I WANT TO ANSWER:\ndef add(a, b):\n    return a + b"}]
    e.answer, e.reward, e.success, e.tests_passed, e.done = "def add(a, b):\n    return a + b", 1.0, True, 2, True
    return e


def test_trajectory_of_an_episode_and_its_parquet_columns(tmp_path):
    e = _finished_episode()
    row = dataclasses.asdict(Trajectory.of_episode(e))
    assert row == {"traj_id": "t/1__2", "task_id": "t/1", "sample_idx": 2, "messages": dumps(e.messages),
                   "answer": e.answer, "reward": 1.0, "success": True, "tests_passed": 2, "tests_total": 2,
                   "n_turns": 2, "error": None, "training_info": TASK.ground_truth, "metric": "tests passed",
                   "scoring": "strict"}
    ev = dataclasses.asdict(EvalResult.of_episode(e, method="zero_shot", mode="multi_turn"))
    assert ev == row | {"method": "zero_shot", "mode": "multi_turn", "values_stated": None}
    assert pq.read_schema(write_rows([ev], tmp_path / "e.parquet")).names == _fields(EvalResult)
    # A frontend episode: no test cases, the similarity's name as the metric, no answer -> "".
    fe = FrontendEpisode(PAGE, 0, 2, metric="pixel")
    fe.reward = 0.25
    page = dataclasses.asdict(Trajectory.of_episode(fe))
    assert (page["tests_total"], page["metric"], page["answer"], page["reward"]) == (0, "pixel", "", 0.25)
    # Pages are not scored by tests: whatever scoring the family is given, the row says none.
    assert page["scoring"] == "" == FrontendEpisode(PAGE, 0, 2, scoring="official").scoring
    assert dataclasses.asdict(Trajectory.of_episode(Episode(TASK, 0, 2, scoring="official")))["scoring"] == "official"


def test_turns_of_a_trajectory():
    row = dataclasses.asdict(Trajectory.of_episode(_finished_episode()))
    turns = turns_of(row)
    assert turns == [Turn("t/1__2", "t/1", 0, 1, "Any rules?", "No.", False),
                     Turn("t/1__2", "t/1", 1, 3, turns[1].action, None, True)]


# ---- the task-family registry -------------------------------------------------------------------------------------
class Chat:
    def __init__(self, spec):
        self.spec = spec

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        return ["x"] * len(convs)


def test_registry_knows_both_families(tmp_path):
    assert set(FAMILIES) >= {"backend", "frontend"}
    with pytest.raises(ValueError, match="unknown task family 'mobile'"):
        family("mobile")
    write_rows([TASK.to_row(), {**TASK.to_row(), "task_id": "t2", "split": "test"}], tmp_path / "b" / "tasks.parquet")
    write_rows([PAGE.to_row()], tmp_path / "f" / "tasks.parquet")
    backend, frontend = family("backend"), family("frontend")
    assert backend.read_tasks(tmp_path / "b", "train") == [TASK]
    assert [t.task_id for t in backend.read_tasks(tmp_path / "b", "test")] == ["t2"]
    assert frontend.read_tasks(tmp_path / "f", "test") == [PAGE]
    ep = backend.episode(TASK, 1, 3, mode="single_turn")
    assert type(ep) is Episode and ep.max_turns == 1 and ep.sample_idx == 1
    assert type(frontend.episode(PAGE, 0, 2)) is FrontendEpisode


def test_registry_pools_follow_the_config():
    cfg = load_config("micro", [])
    pool = family(cfg).load_pool(cfg)
    assert pool and all(isinstance(t, Task) for t in pool) and {t.split for t in pool} <= {"train", "test"}
    fcfg = load_config("micro", ["task_family=frontend"])
    assert all(isinstance(t, FrontendTask) for t in family(fcfg).load_pool(fcfg))


def test_backend_simulator_is_the_policy_or_a_chat_model_loaded_by_the_stage():
    cfg = load_config("micro", ["models.simulator=api:sim"])
    policy, loaded = Chat("policy"), []
    load = lambda spec: loaded.append(spec) or Chat(spec)  # noqa: E731
    assert family(cfg).simulator(cfg, load, policy) is policy and loaded == []
    assert family(cfg).simulator(cfg, load).spec == "api:sim" and loaded == ["api:sim"]


def test_frontend_simulator_is_an_env_whose_vision_model_comes_from_the_stage(monkeypatch):
    import sweet.render

    class Renderer:
        def __init__(self, **kw):
            self.kw = kw

        def close(self):
            pass

    monkeypatch.setattr(sweet.render, "Renderer", Renderer)
    cfg = load_config("micro", ["task_family=frontend", "frontend.simulator=api:vision"])
    env = family(cfg).simulator(cfg, Chat, Chat("policy"))  # the policy never plays the frontend user
    assert isinstance(env, FrontendEnv) and env.simulator.chat.spec == "api:vision"
    assert env.renderer.kw["blank_on_failure"] is False and env.sim_reply_chars == cfg.frontend.sim_reply_chars
