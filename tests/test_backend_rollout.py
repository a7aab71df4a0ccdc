"""Lockstep episodes, answer extraction, sharded collection and resume, preference pairs.

`ScriptedLM` stands in for the policy and the simulator (a real LM is exercised in the end-to-end test): it
records every batched call so the tests can check that one call serves all live episodes of a turn.
"""


import pytest

from sweet.colbench.backend import ANSWER_MARK, LAST_TURN_NOTE, Episode, extract_answer, rollout
from sweet.colbench.tasks import Task, select_tasks
from sweet.colbench.sources import load_tasks
from sweet.stages.pairs import make_pairs

TASK = Task("t1", "train", "Add two numbers.\n\nThe signature of the function is: def add(a, b)",
            "def add(a, b):\n    return a + b + 1", [f"add({i}, {i})" for i in range(10)])
RIGHT = f"{ANSWER_MARK}\n```python\ndef add(a, b):\n    return a + b + 1\n```"
WRONG = f"{ANSWER_MARK}\ndef add(a, b):\n    return a + b + 1 if a < 5 else 0"


class ScriptedLM:
    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        self.calls.append(len(convs))
        return [self.script(c) for c in convs]


def agent_script(conv):
    turns = sum(m["role"] == "assistant" for m in conv)
    asks = "Should I add anything extra?"
    # Episode-specific behaviour keyed off the (unique) problem text: one answers at once, one asks first.
    if "QUICK" in conv[0]["content"]:
        return WRONG
    return asks if turns == 0 else RIGHT


def test_extract_answer():
    assert extract_answer("I want to answer:\n```python\nx = 1\n```", False) == "x = 1"
    assert extract_answer("What is the rate?", False) is None
    assert extract_answer("def f(): pass", True) == "def f(): pass"
    assert extract_answer("Sure! Here it is:\ndef f():\n    return 1\nHope it helps", True).startswith("def f():")


def test_extract_answer_drops_prose_after_unfenced_code():
    # The shape of 28 of 50 oracle answers on validation tasks: a right function, then an explanation or a stray fence.
    text = ("I WANT TO ANSWER: def fee(days):\n    if days > 3:\n        return 5\n    else:\n        return 0\n\n"
            "# Example usage:\nprint(fee(4))\n```\n\nThis function returns 5 if days is over 3.")
    assert extract_answer(text, False) == ("def fee(days):\n    if days > 3:\n        return 5\n    else:\n"
                                           "        return 0\n\n# Example usage:\nprint(fee(4))")
    # The marker misspelt ("I" dropped), the code on the marker's line: found by its `def`.
    assert extract_answer("WANT TO ANSWER: def f(x):\n    return x\nThat is all.", True) == "def f(x):\n    return x"
    # A syntax error inside the function is not cut around: the answer stays broken (its own fault).
    broken = "def f(x):\n    y = (x if x)\n    return y\nDone."
    assert extract_answer(broken, True) == broken
    # A `def` named in the prose before a fenced block: the fence holds the answer.
    assert extract_answer("I WANT TO ANSWER: here is `def f(x)`:\n```python\ndef f(x):\n    return x\n```", False) \
        == "def f(x):\n    return x"
    # A lone import line before a fenced block: the fence holds the answer.
    assert extract_answer("I WANT TO ANSWER:\nimport math\n```python\nimport math\ndef f(x):\n    return math.floor(x)\n```",
                          True) == "import math\ndef f(x):\n    return math.floor(x)"
    # A question after the marker has no code to find and stays as it is (scored 0).
    assert extract_answer("I WANT TO ANSWER: What is the rate?", False) == "What is the rate?"


def test_lockstep_rollout_scores_in_sandbox():
    quick = Task("t2", "train", TASK.problem_description + " QUICK", TASK.ground_truth, TASK.test_cases)
    eps = [Episode(TASK, 0, 3), Episode(quick, 0, 3), Episode(TASK, 1, 3)]
    policy = ScriptedLM(agent_script)
    sim = ScriptedLM(lambda conv: "Add one more to the sum. " * 40)
    finished = []
    rollout(eps, policy, sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0, on_done=finished.extend)
    assert policy.calls == [3, 2], "one batched call per turn, over the live episodes only"
    assert sim.calls == [2]
    assert [e.n_turns for e in eps] == [2, 1, 2]
    assert eps[0].reward == 1.0 and eps[0].success
    assert eps[1].reward == 0.5 and not eps[1].success  # wrong for a >= 5
    assert len(eps[0].messages[2]["content"]) <= 400 + len(LAST_TURN_NOTE)
    sim_view = eps[0].simulator_view()
    assert "return a + b + 1" in sim_view[0]["content"] and sim_view[1]["role"] == "user"
    assert sorted(id(e) for e in finished) == sorted(id(e) for e in eps)


def test_turn_limit_takes_last_response_as_answer():
    policy = ScriptedLM(lambda conv: "def add(a, b):\n    return a + b + 1")
    sim = ScriptedLM(lambda conv: "I don't know.")
    (ep,) = rollout([Episode(TASK, 0, 2)], policy, sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0)
    assert ep.n_turns == 2 and ep.success
    assert "last turn" in ep.messages[-2]["content"]


def test_pairs_prefer_higher_reward_within_a_task():
    trajs = [{"traj_id": f"{t}__{i}", "task_id": t, "sample_idx": i, "reward": r, "messages": "[]",
              "training_info": "c"} for t, rs in (("a", [0.2, 1.0, 0.2]), ("b", [0.5, 0.5])) for i, r in enumerate(rs)]
    pairs = make_pairs(trajs, 1e-6, 8)  # the margin rule
    assert [(p["chosen_traj_id"], p["rejected_traj_id"]) for p in pairs] == [("a__1", "a__0"), ("a__1", "a__2")]
    assert make_pairs(trajs, 1e-6, 1)[0]["chosen_reward"] == 1.0


def test_bundled_tasks_load_and_select():
    tasks = load_tasks()
    picked = select_tasks(tasks, 3, 2, seed=0)
    assert [t.split for t in picked] == ["train"] * 3 + ["test"] * 2
    assert picked == select_tasks(tasks, 3, 2, seed=0)
    with pytest.raises(ValueError, match="only"):
        select_tasks(tasks, 10_000, 1, seed=0)


def test_bad_task_file_names_file_row_field(tmp_path):
    f = tmp_path / "tasks.jsonl"
    f.write_text('{"split": "train", "problem_description": "x", "ground_truth": "def f(): pass", '
                 '"test_cases": {"a": "f()"}}\n{"split": "test", "problem_description": "x", "test_cases": ["f()"]}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl: row 1: missing field 'ground_truth'"):
        load_tasks(str(f))
    f.write_text('{"problem_description": "x", "ground_truth": "def f(): pass", "test_cases": ["f()"]}\n')
    with pytest.raises(ValueError, match="split"):
        load_tasks(str(f))
    d = tmp_path / "official"
    d.mkdir()
    (d / "train.jsonl").write_text('{"problem_description": "x", "ground_truth": "def f(): pass", "test_cases": {"t": "f()"}}\n')
    (d / "test.jsonl").write_text('{"problem_description": "y", "ground_truth": "def f(): pass", "test_cases": {"t": "f()"}}\n')
    assert [(t.task_id, t.split) for t in load_tasks(str(d))] == [("train-0", "train"), ("test-0", "test")]
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_tasks(str(tmp_path / "missing.jsonl"))


def test_every_bundled_reference_passes_its_own_tests_in_the_sandbox():
    from sweet.sandbox import evaluate_many

    tasks = load_tasks() + load_tasks("bundled:easy")
    reports = evaluate_many([(t.ground_truth, t.ground_truth, t.test_cases) for t in tasks], workers=2)
    failed = [(t.task_id, r.error or r.errors) for t, r in zip(tasks, reports) if not r.success]
    assert not failed
    assert all(r.total == 10 for r in reports)


def test_official_pair_rule_needs_a_success_and_pairs_the_best_with_every_worse():
    trajs = [{"traj_id": f"{t}__{i}", "task_id": t, "sample_idx": i, "reward": r, "messages": "[]",
              "training_info": "c"}
             for t, rs in (("a", [0.3, 1.0, 0.0, 1.0]), ("b", [0.9, 0.5]), ("c", [1.0, 1.0])) for i, r in enumerate(rs)]
    pairs = make_pairs(trajs, 0.0, 8, rule="official")
    assert [(p["chosen_traj_id"], p["rejected_traj_id"]) for p in pairs] == [("a__1", "a__2"), ("a__1", "a__0")]
    margin = make_pairs(trajs, 0.4, 8, rule="margin")
    assert {(p["chosen_traj_id"], p["rejected_traj_id"]) for p in margin} == {
        ("a__1", "a__0"), ("a__1", "a__2"), ("a__3", "a__0"), ("a__3", "a__2"), ("b__0", "b__1")}
    with pytest.raises(ValueError, match="rule"):
        make_pairs(trajs, 0.0, 8, rule="best")


def _asked_and_answered(view: str) -> Episode:
    """An episode of 3 turns after one exchange, its last reply carrying the last-turn note, its question long."""
    e = Episode(TASK, 0, 2, sim_view=view)
    e.messages += [{"role": "assistant", "content": "Should I add one? " + "x" * 700},
                   {"role": "user", "content": "Yes, add one." + LAST_TURN_NOTE},
                   {"role": "assistant", "content": "And for negatives?"}]
    return e


def test_simulator_view_chat_swaps_roles_and_transcript_is_one_message():
    from sweet.colbench.backend import SIM_TRANSCRIPT, SIM_VIEW_CHARS, simulator_system

    chat = _asked_and_answered("chat").simulator_view()
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"]
    assert chat[0]["content"] == simulator_system(TASK)
    assert chat[1]["content"] == "Should I add one? " + "x" * (SIM_VIEW_CHARS - 18) + " [...]"
    assert chat[2]["content"] == "Yes, add one."  # the note is the agent's, never shown to the simulator
    transcript = _asked_and_answered("transcript").simulator_view()
    assert [m["role"] for m in transcript] == ["system", "user"] and transcript[0] == chat[0]
    text = transcript[1]["content"]
    dialogue = f"Agent: {chat[1]['content']}\n\nYou: Yes, add one.\n\nAgent: And for negatives?"
    assert text == SIM_TRANSCRIPT.format(transcript=dialogue)
    assert "last turn" not in text and TASK.problem_description not in text  # the task stays in the system message
    with pytest.raises(ValueError, match="simulator view"):
        Episode(TASK, 0, 2, sim_view="released")


def test_the_view_reaches_the_simulator_in_a_rollout():
    from sweet.colbench.registry import family

    seen = []
    sim = ScriptedLM(lambda conv: seen.append(conv) or "Add one.")
    eps = [family("backend").episode(TASK, 0, 3, sim_view="transcript")]
    rollout(eps, ScriptedLM(agent_script), sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0)
    assert eps[0].success and len(seen) == 1
    assert [m["role"] for m in seen[0]] == ["system", "user"]
    assert seen[0][1]["content"].startswith("The conversation so far") and "Agent: Should I add" in seen[0][1]["content"]


@pytest.mark.parametrize("mode", ["multi_turn", "single_turn", "oracle"])
def test_agent_view_system_puts_the_instructions_in_a_system_message(mode):
    """'system' (the released layout) is 'user' split at the task: instructions + "\\n\\n" + task, nothing lost."""
    from sweet.colbench.backend import task_message

    task = Task("t1", "train", TASK.problem_description, TASK.ground_truth, TASK.test_cases, ["Add one more."])
    for turns in (3, 1):
        user, system = (Episode(task, 0, turns, mode=mode, agent_view=v).messages for v in ("user", "system"))
        assert [m["role"] for m in user] == ["user"] and [m["role"] for m in system] == ["system", "user"]
        assert system[0]["content"] + "\n\n" + system[1]["content"] == user[0]["content"]
        assert TASK.problem_description in task_message(system) and TASK.problem_description not in system[0]["content"]
        assert "{" not in system[0]["content"]  # every template field filled in
        if mode == "oracle":
            assert "Add one more." in system[1]["content"]
        if mode == "multi_turn" and turns == 1:
            assert system[1]["content"].endswith(LAST_TURN_NOTE)
    with pytest.raises(ValueError, match="agent view"):
        Episode(TASK, 0, 2, agent_view="assistant")


def test_agent_view_system_reaches_the_policy_and_not_the_simulator():
    seen_policy, seen_sim = [], []

    def policy(conv):
        seen_policy.append(conv)
        return agent_script(conv[1:])  # the script keys off the task message

    sim = ScriptedLM(lambda conv: seen_sim.append(conv) or "Add one.")
    ep = Episode(TASK, 0, 3, agent_view="system")
    rollout([ep], ScriptedLM(policy), sim, max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0)
    assert ep.success and [m["role"] for m in ep.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert all(c[0]["role"] == "system" for c in seen_policy)
    # The simulator reads the same dialogue in either view: its own instructions, then the agent's question.
    same = Episode(TASK, 0, 3)
    same.messages += ep.messages[2:]
    assert seen_sim[0] == Episode(TASK, 0, 3, agent_view="system", messages=ep.messages[:3]).simulator_view()
    assert seen_sim[0][1:] == [{"role": "user", "content": "Should I add anything extra?"}]
    assert ep.simulator_view() == same.simulator_view()


def test_best_of_n_finds_the_task_in_either_view(monkeypatch):
    """BestOfN gives the critic each conversation's own reference c, found by the message that states the task.
    `score_any` is replaced by a recorder standing for the critic (it scores a candidate by its length)."""
    from sweet.algos import scoring
    from sweet.colbench.backend import task_message
    from sweet.stages.best_of_n import BestOfN

    other = Task("t2", "train", "Multiply two numbers.", "def mul(a, b):\n    return a * b", TASK.test_cases)
    for view in ("user", "system"):
        eps = [Episode(t, 0, 3, agent_view=view) for t in (TASK, other)]
        info = {task_message(e.messages): e.task.ground_truth for e in eps}
        assert len(info) == 2
        given = []
        monkeypatch.setattr(scoring, "score_any", lambda critic, conv, cands, c, **kw: given.append(c) or
                            [len(x) for x in cands])
        policy = ScriptedLM(lambda conv: "x")
        policy.generate = lambda convs, *a, **k: ["a", "bbb", "cc"] * len(convs)
        policy.name, policy.batch_size = "scripted", 2
        best = BestOfN(policy, None, info, 3, 1.0, {}).generate([e.messages for e in eps], 8)
        assert best == ["bbb", "bbb"] and given == [TASK.ground_truth, other.ground_truth]


def test_agent_view_system_on_frontend_episodes():
    from sweet.colbench.frontend import FrontendEpisode
    from sweet.colbench.frontend_tasks import FrontendTask

    page = FrontendTask("p1", "train", "A red banner with a title.", "<html><body>hi</body></html>")
    user, system = (FrontendEpisode(page, 0, 3, agent_view=v).messages for v in ("user", "system"))
    assert system[0]["content"] + "\n\n" + system[1]["content"] == user[0]["content"]
    assert system[1]["content"] == "Description:\nA red banner with a title."
