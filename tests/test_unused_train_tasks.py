"""scripts/unused_train_tasks.py: the validation file holds exactly the train tasks a run did not use."""

import json
import runpy
from pathlib import Path

import pytest

from sweet.store import write_rows

ROOT = Path(__file__).resolve().parents[1]
mod = runpy.run_path(str(ROOT / "scripts" / "unused_train_tasks.py"))


def test_unused_train_tasks_are_relabelled_and_used_ones_dropped(tmp_path):
    src = tmp_path / "tasks.jsonl"
    recs = [{"task_id": f"t{i}", "split": "train" if i < 4 else "test", "problem_description": "p"} for i in range(6)]
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    used = tmp_path / "used.parquet"
    write_rows([{"task_id": "t1", "split": "train"}, {"task_id": "t4", "split": "test"}], used)
    out = tmp_path / "val.jsonl"
    assert mod["main"](["--used", str(used), "--source", str(src), "--out", str(out), "--n", "2"]) == 0
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["task_id"], r["split"]) for r in got] == [("t0", "test"), ("t2", "test")]


def test_a_bad_line_is_named(tmp_path):
    src = tmp_path / "tasks.jsonl"
    src.write_text('{"task_id": "a", "split": "train"}\nnot json\n')
    with pytest.raises(ValueError, match="row 1"):
        mod["unused_train_tasks"](src, set(), None)
