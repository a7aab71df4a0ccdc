"""backend.answer_prefill: the agent's last-turn reply is begun for it ("I WANT TO ANSWER:" and a python fence) and
the backend continues that message, so a dialogue that asked still ends with code. The contract (`sweet.chat`):
a conversation ending with an assistant message is continued, and the backend returns the whole message.

`RecordingLM` stands in for a chat backend (the real engines are tested in tests/test_llamacpp.py): it records each
conversation it is given and continues a begun message the way the contract says."""

from __future__ import annotations

from types import SimpleNamespace

from sweet.chat import GenerationFailure, prefill_of, whole_reply
from sweet.colbench.backend import ANSWER_MARK, ANSWER_PREFILL, LAST_TURN_NOTE, Episode, rollout
from sweet.colbench.tasks import Task
from sweet.stages.candidates import agent_prompt

TASK = Task("t1", "train", "Add two numbers.\n\nThe signature of the function is: def add(a, b)",
            "def add(a, b):\n    return a + b + 1", [f"add({i}, {i})" for i in range(10)])
BODY = "def add(a, b):\n    return a + b + 1\n```"


class RecordingLM:
    """Asks a question whenever it is free to; continues a begun answer with BODY."""

    def __init__(self):
        self.convs = []

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        self.convs += [list(c) for c in convs]  # copies: the episode appends to its own list
        return [whole_reply(c, BODY) if prefill_of(c) else "Should the sum have anything added?" for c in convs]


class Simulator:
    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        return ["Add one to the sum." for _ in convs]


def test_whole_reply_adds_the_prefill_once():
    conv = [{"role": "user", "content": "q"}, {"role": "assistant", "content": ANSWER_PREFILL}]
    assert whole_reply(conv, "x = 1\n```") == ANSWER_PREFILL + "x = 1\n```"
    assert whole_reply(conv, ANSWER_PREFILL + "x = 1") == ANSWER_PREFILL + "x = 1"  # a server that echoes it
    assert whole_reply(conv[:1], "hello") == "hello"  # nothing begun: the reply as generated
    failed = GenerationFailure("timeout")
    assert whole_reply(conv, failed) is failed


def test_only_the_last_turn_is_begun_and_its_answer_is_scored():
    agent = RecordingLM()
    ep = Episode(TASK, 0, 2, prefill=True)
    rollout([ep], agent, Simulator(), max_new_tokens=64, sim_max_new_tokens=16, temperature=0.0)
    first, last = agent.convs
    assert first[-1]["role"] == "user"  # turn 1: free to ask
    assert last[-1] == {"role": "assistant", "content": ANSWER_PREFILL} and last[-2]["content"].endswith(LAST_TURN_NOTE)
    assert ep.messages[-1]["content"] == ANSWER_PREFILL + BODY  # the whole message is kept, trained on and scored
    assert [m["role"] for m in ep.messages].count("assistant") == 2 and ep.tests_passed == 10 and ep.success


def test_without_prefill_the_same_agent_asks_to_the_end():
    agent = RecordingLM()
    ep = Episode(TASK, 0, 2)
    rollout([ep], agent, Simulator(), max_new_tokens=64, sim_max_new_tokens=16, temperature=0.0)
    assert all(c[-1]["role"] == "user" for c in agent.convs)
    assert ep.messages[-1]["content"].startswith("Should") and not ep.success


def test_single_turn_modes_are_never_begun():
    ep = Episode(TASK, 0, 3, mode="single_turn", prefill=True)
    assert ep.agent_prompt(final=True) is ep.messages


def test_candidates_are_begun_on_last_turns_only():
    on = SimpleNamespace(task_family="backend", backend=SimpleNamespace(answer_prefill=True))
    off = SimpleNamespace(task_family="backend", backend=SimpleNamespace(answer_prefill=False))
    early = [{"role": "user", "content": "Task"}]
    last = early + [{"role": "assistant", "content": "Ask?"}, {"role": "user", "content": "No." + LAST_TURN_NOTE}]
    assert agent_prompt(last, on)[-1] == {"role": "assistant", "content": ANSWER_PREFILL}
    assert agent_prompt(early, on) == early and agent_prompt(last, off) == last
    assert ANSWER_PREFILL.startswith(ANSWER_MARK)
