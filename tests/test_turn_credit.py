"""scripts/turn_credit.py's readings on hand-made per-turn advantages (the critic itself is replaced by a lookup
table standing for `critic.turn_credit`; that function is pinned to the candidates stage in test_diagnostics.py)."""

from __future__ import annotations

import json

import pytest

from tests._scripts import load_script



def _script():
    return load_script("turn_credit")


def _row(task_id: str, acts: list[str], reward: float) -> dict:
    msgs = [{"role": "user", "content": "task"}]
    for a in acts:
        msgs += [{"role": "assistant", "content": a}, {"role": "user", "content": "reply"}]
    return {"task_id": task_id, "messages": json.dumps(msgs[:-1]), "training_info": "def f(): pass", "reward": reward}


def test_credit_by_first_message_position_and_correlation():
    m = _script()
    rows = [_row("t1", ["What rate?", "I WANT TO ANSWER: def f(): return 1"], 1.0),
            _row("t1", ["I WANT TO ANSWER: def f(): return 0"], 0.0),
            _row("t2", ["Which order?", "I WANT TO ANSWER: def g(): return 1"], 0.5),
            _row("t2", ["def g(): return 2", "I WANT TO ANSWER: def g(): return 3"], 0.1),
            _row("t3", ["hello there"], 0.3)]  # a task with one episode: no within-task variation
    table = {"What rate?": [0.2, 1.0], "I WANT TO ANSWER: def f(): return 0": [-1.0],
             "Which order?": [0.1, 0.8], "def g(): return 2": [-0.3, 0.0], "hello there": [5.0]}
    seen = []

    def credit(msgs, info):
        seen.append(info)
        return table[msgs[1]["content"]]

    eps = m.episode_credit(rows, credit)
    assert len(eps) == 5 and seen == ["def f(): pass"] * 5
    assert eps[3]["kinds"] == ["code, no marker", "answer (marker)"]
    s = m.summarise(eps)
    fm = s["first_message"]
    assert fm["question"]["episodes"] == 2 and fm["question"]["turn0_adv"] == pytest.approx(0.15)
    assert fm["answer (marker)"]["turn0_adv"] == -1.0 and fm["prose"]["reward"] == 0.3
    assert s["multi_turn_episodes"] == 3
    assert s["by_position"]["first"] == pytest.approx((0.2 + 0.1 - 0.3) / 3)
    assert s["by_position"]["last"] == pytest.approx((1.0 + 0.8 + 0.0) / 3) and s["by_position"]["middle"] is None
    assert s["last_turn_share_of_abs_adv"] == pytest.approx(1.8 / 2.4)
    corr = s["within_task_corr_with_reward"]
    assert corr["episodes"] == 4 and corr["turn0"] == pytest.approx(0.68 / (0.8 * 0.58) ** 0.5)  # t3 adds nothing
    assert "| question | 2 | 0.750 | +0.150 |" in m.render(s)


def test_episodes_cut_by_the_critics_max_length_are_skipped():
    m = _script()
    eps = m.episode_credit([_row("t1", ["q?", "a"], 1.0)], lambda msgs, info: [0.5])  # one turn of two kept
    assert eps == [] and m.summarise(eps)["within_task_corr_with_reward"]["turn0"] is None


def test_cli_refuses_missing_inputs(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _script().main(["--trajectories", str(tmp_path / "none.parquet"), "--critic", str(tmp_path)])
    assert e.value.code == 2 and "none.parquet does not exist" in capsys.readouterr().err
