"""The ColBench backend protocol: modes, the turn cap, API failures, and evaluating several systems in one table.

`ScriptedLM` stands in for a local model; the API systems are real HTTP clients talking to the stub server
(tests/openai_stub.py), which stands in for vLLM/OpenAI. The sandbox, store and MLflow are the real ones.
"""

import json
import sqlite3

import pytest

from sweet.agents.api import GenerationFailure
from sweet.colbench.backend import ANSWER_MARK, SIM_REPLY_CHARS, Episode, rollout
from sweet.colbench.tasks import Task
from sweet.config import load_config
from sweet.stages.evaluate import evaluate_models
from sweet.stages.report import results_table, summarize

TASK = Task("t1", "test", "Add two numbers.\n\nThe signature of the function is: def add(a, b)",
            "def add(a, b):\n    return a + b + 1", [f"add({i}, {2 * i})" for i in range(10)])
RIGHT = f"{ANSWER_MARK}\n```python\ndef add(a, b):\n    return a + b + 1\n```"


class ScriptedLM:
    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        self.calls.append((len(convs), temperature))
        return [self.script(c) for c in convs]


def test_single_turn_mode_answers_at_once():
    ep = Episode(TASK, 0, 10, mode="single_turn")
    assert ep.max_turns == 1 and "cannot ask" in ep.messages[0]["content"]
    policy = ScriptedLM(lambda c: "Which numbers?")  # asks anyway: the response is the answer
    sim = ScriptedLM(lambda c: "never called")
    rollout([ep], policy, sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0)
    assert ep.done and ep.n_turns == 1 and sim.calls == [] and ep.reward == 0.0


def test_turn_cap_is_the_papers_and_simulator_is_greedy_and_cut():
    with pytest.raises(ValueError, match="between 1 and 10"):
        Episode(TASK, 0, 11)
    with pytest.raises(ValueError, match="mode"):
        Episode(TASK, 0, 2, mode="chatty")
    policy = ScriptedLM(lambda c: "What should be added?")
    sim = ScriptedLM(lambda c: "x" * 5000)
    (ep,) = rollout([Episode(TASK, 0, 10)], policy, sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.7)
    assert ep.n_turns == 10 and ep.done  # the 10th response is the answer
    assert all(t == 0.0 for _, t in sim.calls) and all(t == 0.7 for _, t in policy.calls)
    replies = [m["content"] for m in ep.messages[1:] if m["role"] == "user"]
    assert len(replies) == 9 and all(r.startswith("x" * SIM_REPLY_CHARS) and "x" * (SIM_REPLY_CHARS + 1) not in r
                                     for r in replies)


class BatchScript:
    """One scripted list of outputs per batched call (the lockstep rollout makes one call per turn)."""

    def __init__(self, *batches):
        self.batches = list(batches)

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        out = self.batches.pop(0)
        assert len(out) == len(convs)
        return out


def test_api_failures_end_the_episode_and_are_counted():
    eps = [Episode(TASK, i, 3) for i in range(3)]
    ask = "What is added?"
    agent = BatchScript([_failure("HTTP 503 after 5 attempts"), ask, ask], [RIGHT])
    sim = BatchScript([_failure("timeout after 5 attempts"), "One more."])
    done = []
    rollout(eps, agent, sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0, on_done=done.extend)
    assert len(done) == 3 and all(e.done for e in eps)
    assert [e.error for e in eps] == ["agent failed: HTTP 503 after 5 attempts",
                                      "simulator failed: timeout after 5 attempts", None]
    assert eps[2].success and eps[0].reward == eps[1].reward == 0.0
    rows = [{"reward": e.reward, "success": e.success, "n_turns": e.n_turns, "error": e.error} for e in eps]
    s = summarize(rows)
    assert s["failed"] == 2 and s["n"] == 3 and abs(s["tests_passed"] - 100 / 3) < 1e-9
    assert results_table({"m/multi_turn": s}).splitlines()[2].endswith("| 3 | 2 |")


def _failure(reason):
    return GenerationFailure(reason)


def test_evaluate_models_api_systems_one_table(tmp_path, openai_server, monkeypatch):
    """Two API 'models' and an API simulator on the stub server; the key never reaches artifacts or MLflow."""
    secret = "sk-test-DO-NOT-LEAK-4242"
    monkeypatch.setenv("SWEET_TEST_KEY", secret)

    def responder(req):
        msgs = req["messages"]
        if msgs[0]["role"] == "system":  # the simulator sees the hidden code in its system prompt
            return "Add one to the sum."
        if req["model"] == "good":
            return RIGHT if len(msgs) > 1 else "Anything special about the sum?"
        return f"{ANSWER_MARK}\ndef add(a, b):\n    return a + b"
    openai_server.responder = responder
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({**TASK.to_row(), "task_id": f"t{i}"}) + "\n" for i in range(3)))
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                f"tasks.source={tasks}", f"api.base_url={openai_server.base_url}",
                                "api.key_env=SWEET_TEST_KEY", "api.max_retries=0", "models.simulator=api:sim",
                                "evaluate.max_turns=3", 'evaluate.modes=["multi_turn", "single_turn"]'])
    openai_server.faults.extend([500])  # the first request fails for good (no retries): counted, not dropped
    out, metrics = evaluate_models(cfg, ["api:good", "api:bad"], n_tasks=2)
    table = (out / "results.md").read_text()
    assert "| good | multi_turn |" in table and "| bad | single_turn |" in table
    assert metrics["good/multi_turn/n"] == 2 and metrics["bad/single_turn/tests_passed"] == 0.0
    assert sum(metrics[f"{s}/{m}/failed"] for s in ("good", "bad") for m in ("multi_turn", "single_turn")) == 1
    assert metrics["good/single_turn/mean_turns"] == 1.0
    assert all(r["headers"]["authorization"] == f"Bearer {secret}" for r in openai_server.requests)
    # Resume: a second call finds every episode on disk and sends no request.
    before = len(openai_server.requests)
    out2, _ = evaluate_models(cfg, ["api:good", "api:bad"], n_tasks=2)
    assert out2 == out and len(openai_server.requests) == before
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
    con = sqlite3.connect(tmp_path / "m.db")
    assert not [r for r in con.execute("select key, value from params") if secret in str(r)]
