"""scripts/dialogue_failures.py on a hand-made table: each failure mode counted once where it occurs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("dialogue_failures", ROOT / "scripts" / "dialogue_failures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
