"""The calibration's `oracle` mode: single-turn, with the task's hidden decisions written into the task."""

import pytest

from sweet.colbench.backend import ANSWER_MARK, Episode
from sweet.colbench.tasks import Task
from sweet.config import load_config

TASK = Task("t1", "test", "Write late_fee(days). The signature of the function is: def late_fee(days)",
            "def late_fee(days):\n    return min(0.25 * days, 5.0)\n", ["late_fee(3)"],
            decisions=["The fee is 25 cents per day late.", "The fee never goes above $5."])


def test_oracle_episode_answers_at_once_with_the_decisions_in_the_task():
    e = Episode(TASK, 0, max_turns=4, mode="oracle")
    first = e.messages[0]["content"]
    assert e.max_turns == 1 and len(e.messages) == 1
    assert "- The fee is 25 cents per day late.\n- The fee never goes above $5." in first
    assert first.index("def late_fee(days)") < first.index("25 cents") and ANSWER_MARK in first
    single = Episode(TASK, 0, max_turns=4, mode="single_turn").messages[0]["content"]
    assert "25 cents" not in single and "25 cents" not in Episode(TASK, 0, 4).messages[0]["content"]


def test_oracle_needs_decisions_and_the_config_accepts_the_mode():
    bare = Task("t2", "test", "Write f(x).", "def f(x):\n    return x\n", ["f(1)"])
    with pytest.raises(ValueError, match="t2.*decisions"):
        Episode(bare, 0, max_turns=2, mode="oracle")
    assert load_config("micro", ['evaluate.modes=["single_turn","multi_turn","oracle"]']).evaluate.modes[-1] == "oracle"
