"""Write a validation task file: the train tasks of a task file that a run never used, relabelled `split: test`.

A run's held-out tasks should be scored once; to check a result again without looking at them, evaluate on train
tasks the run did not train on (its generate_tasks stage lists the ones it used):

    .venv/bin/python scripts/unused_train_tasks.py --used artifacts/laptop/generate_tasks/<fp>/tasks.parquet \\
        --out artifacts/laptop_val/val_tasks.jsonl --n 50
    sweet evaluate --profile laptop --set tasks.source=artifacts/laptop_val/val_tasks.jsonl ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sweet.colbench.tasks import bundled_path
from sweet.store import iter_jsonl, read_rows


def unused_train_tasks(source: Path, used: set[str], n: int | None) -> list[dict]:
    """The train records of `source` (JSONL, file order) whose task_id is not in `used`, first `n`, split 'test'."""
    out = []
    for row, rec in iter_jsonl(source):  # a malformed line: one error naming the file and row
        if "split" not in rec or "task_id" not in rec:
            raise ValueError(f"{source}: row {row}: not a task record (needs 'split' and 'task_id')")
        if rec["split"] == "train" and rec["task_id"] not in used:
            out.append(dict(rec, split="test"))
    return out if n is None else out[:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--used", required=True, type=Path, help="a generate_tasks stage's tasks.parquet")
    ap.add_argument("--source", type=Path, default=bundled_path("bundled:lite"), help="the task file (JSONL; default: the lite tier)")
    ap.add_argument("--out", required=True, type=Path, help="where to write the validation tasks (JSONL)")
    ap.add_argument("--n", type=int, default=None, help="keep the first N (default: all)")
    args = ap.parse_args(argv)
    for f in (args.used, args.source):
        if not f.is_file():
            print(f"unused_train_tasks: {f} not found", file=sys.stderr)
            return 2
    tasks = unused_train_tasks(args.source, {r["task_id"] for r in read_rows(args.used)}, args.n)
    if not tasks:
        print(f"unused_train_tasks: every train task of {args.source} was used", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    print(f"{len(tasks)} unused train tasks -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
