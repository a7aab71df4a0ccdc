"""scripts/dialogue_failures.py on a hand-made table: each failure mode counted once where it occurs."""

from __future__ import annotations

import json

import pandas as pd

from tests._scripts import load_script


def _script():
    return load_script("dialogue_failures")


def _row(task_id, turns, answer, reward):
    msgs = [{"role": "user", "content": "task"}]
    for i, t in enumerate(turns):
        msgs.append({"role": "assistant" if i % 2 == 0 else "user", "content": t})
    return {"task_id": task_id, "messages": json.dumps(msgs), "answer": answer, "reward": reward}


def test_counts_each_failure_mode(tmp_path, capsys):
    tier = tmp_path / "tier.jsonl"
    tier.write_text(json.dumps({"task_id": "t1", "decision_values": [400, 20]}) + "\n")
    rows = [
        _row("t1", ["I WANT TO ANSWER: ```python\ndef f(x):\n    return 1\n```"], "def f(x):\n    return 1\n", 0.5),
        # a question, the simulator states 400, then an answer with no body
        _row("t1", ["How many points per level?", "Every 400 points.", "I WANT TO ANSWER: def f(x):"],
             "def f(x):", 0.0),
        # a misspelt marker the simulator echoes back
        _row("t1", ["WANT TO ANSWER: here is the plan for the function", "WANT TO ANSWER: here is the plan for the "
             "function", "I WANT TO ANSWER: def f(x):\n    return 2"], "def f(x):\n    return 2", 0.1),
    ]
    table = tmp_path / "trajectories.parquet"
    pd.DataFrame(rows).to_parquet(table)
    assert _script().main([str(table), "--tier", str(tier)]) == 0
    out = capsys.readouterr().out
    assert "| answer (marker) | 1 | 0.500 |" in out and "| question | 1 | 0.000 |" in out
    assert "| marker misspelt | 1 | 0.100 |" in out
    assert "no body (empty or only the def line): 1 (1 of 2 multi-turn)" in out
    assert "simulator replies: 2; echoing the agent: 1; stating a hidden value: 1" in out


def test_names_a_missing_file(tmp_path, capsys):
    assert _script().main([str(tmp_path / "nope.parquet")]) == 2
    assert "nope.parquet does not exist" in capsys.readouterr().err


def test_hidden_values_in_final_answers_paired_by_method(tmp_path, capsys):
    tier = tmp_path / "tier.jsonl"
    tier.write_text(json.dumps({"task_id": "t1", "decision_values": [400, 20]}) + "\n"
                    + json.dumps({"task_id": "t2", "decision_values": [0.15]}) + "\n")
    answer = {("zero_shot", "t1"): "def f(x):\n    return min(1 + x // 100, 10)",  # guesses both values
              ("zero_shot", "t2"): "def g(p):\n    return p * 0.15",  # states it
              ("sweet", "t1"): "def f(x):\n    return min(1 + x // 400, 10)",  # one of two
              ("sweet", "t2"): "def g(p):\n    return p * 0.15"}
    rows = [dict(_row(t, ["a question?", "a reply", "I WANT TO ANSWER: ..."], a, 0.0), method=m)
            for (m, t), a in answer.items()]
    zs, sw = tmp_path / "zs.parquet", tmp_path / "sw.parquet"
    pd.DataFrame(rows[:2]).to_parquet(zs)
    pd.DataFrame(rows[2:]).to_parquet(sw)
    assert _script().main([str(zs), str(sw), "--tier", str(tier), "--baseline", "zero_shot"]) == 0
    out = capsys.readouterr().out
    assert "[zero_shot]: 2 episodes" in out and "[sweet]: 2 episodes" in out
    # zero-shot: (0 + 1) / 2; by chance, t1's answer states none of t2's values and t2's none of t1's
    assert "hidden values stated by the final answer: 50.0 % (mean over 2 tasks; other tasks' values, by chance: " \
           "0.0 %)" in out
    # sweet: (0.5 + 1) / 2; t2's answer "p * 0.15" states no 400 or 20, t1's "x // 400" states no 0.15
    assert "hidden values stated by the final answer: 75.0 % (mean over 2 tasks; other tasks' values" in out
    assert "sweet - zero_shot: +25.0 [+0.0, +50.0] points (2 tasks paired)" in out


def test_chance_values_are_other_tasks_values():
    values = {"a": [1, 2], "b": [2, 3], "c": [4], "d": [5]}
    assert _script().chance_values("a", values) == [3, 4, 5]  # b, c, d; 2 is a's own
    assert _script().chance_values("d", values, k=1) == [1, 2]  # wraps around
    assert _script().chance_values("zz", values) == []


def test_names_an_unknown_baseline(tmp_path, capsys):
    table = tmp_path / "t.parquet"
    pd.DataFrame([dict(_row("t1", ["q?"], "", 0.0), method="sweet")]).to_parquet(table)
    tier = tmp_path / "tier.jsonl"
    tier.write_text(json.dumps({"task_id": "t1", "decision_values": [1]}) + "\n")
    assert _script().main([str(table), "--tier", str(tier), "--baseline", "zero_shot"]) == 2
    assert "no method 'zero_shot'" in capsys.readouterr().err
