"""`sweet eval-backend`: score answers against backend tasks in the sandbox, one JSON line per answer.

Task rows need `ground_truth` and `test_cases`; a row without `task_id` gets its 0-based row index as id. Answer
rows are `{"task_id": ..., "answer": "<python code>"}`. Output keeps the input order of the answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sweet.sandbox import evaluate_many
from sweet.store import iter_jsonl


def read_tasks(path: Path) -> dict[str, tuple[str, list[str]]]:
    tasks = {}
    for row, rec in iter_jsonl(path):
        code, tests = rec.get("ground_truth"), rec.get("test_cases")
        if not isinstance(code, str):
            raise ValueError(f"{path}: row {row}: field 'ground_truth' must be a string of Python code")
        if isinstance(tests, dict):
            tests = list(tests.values())
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"{path}: row {row}: field 'test_cases' must be a non-empty dict or list of call expressions")
        tasks[str(rec.get("task_id", row))] = (code, tests)
    return tasks


def read_answers(path: Path, tasks: dict, what: str = "<python code>") -> list[tuple[str, str]]:
    """(task_id, answer) per row, in file order; every id must be one of `tasks` (shared with eval-frontend)."""
    answers = []
    for row, rec in iter_jsonl(path):
        if "task_id" not in rec or not isinstance(rec.get("answer"), str):
            raise ValueError(f"{path}: row {row}: expected {{\"task_id\": ..., \"answer\": \"{what}\"}}")
        tid = str(rec["task_id"])
        if tid not in tasks:
            raise ValueError(f"{path}: row {row}: task_id {tid!r} is not in the tasks file")
        answers.append((tid, rec["answer"]))
    return answers


def eval_backend(tasks_path: str, answers_path: str, workers: int | None = None, timeout_s: float = 2.0, out=None,
                 scoring: str = "strict") -> int:
    out = out or sys.stdout  # looked up per call: a default bound at import time outlives a redirected stdout
    tasks = read_tasks(Path(tasks_path))
    answers = read_answers(Path(answers_path), tasks)
    reports = evaluate_many([(a, *tasks[tid]) for tid, a in answers], workers=workers, timeout_s=timeout_s,
                            scoring=scoring)
    for (tid, _), r in zip(answers, reports):
        out.write(json.dumps({"task_id": tid, "tests_passed": r.passed, "tests_total": r.total,
                              "reward": r.reward, "success": r.success, "error": r.error, "scoring": scoring}) + "\n")
    return 0
