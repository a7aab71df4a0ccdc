"""Backend ColBench tasks in the official record format.

A record carries `problem_description` (ending with the function signature), `ground_truth` (the hidden
reference code) and `test_cases` (call expressions; expected = the reference's output on the same call).
The bundled file adds `task_id` and `split`. A folder holding `train.jsonl` and `test.jsonl` (the official
layout) also loads; rows without a `task_id` get `<split>-<row>` as id. The official dataset itself loads with
`official:<folder>` (a local copy) or `hub:<dataset id>` (see `sweet.colbench.official`; ids `official-<split>-<row>`).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path


BUNDLED = "bundled"
# Shipped task files: the backend set, and a handful of one-line tasks that a 135M model sometimes solves (the
# `micro` profile's smoke runs need reward spread to have preference pairs at all).
# `bundled:lite` is a tier of 160 small functions that each leave one or two values open (a rate, a cap, a
# threshold, a marker): a 0.5B agent can win it by asking (see scripts/make_lite_tier.py and
# sweet.colbench.lite).
BUNDLED_SETS = {"bundled": "backend_tasks.jsonl", "bundled:easy": "easy_tasks.jsonl",
                "bundled:lite": "backend_lite.jsonl"}


@dataclass
class Task:
    task_id: str
    split: str
    problem_description: str
    ground_truth: str
    test_cases: list[str] = field(default_factory=list)
    # The hidden values in plain words ("Late fees are $0.25 per day."), when the source states them (the lite tier);
    # the simulator sees them beside the code. Never shown to the agent.
    decisions: list[str] = field(default_factory=list)
    # The reference's literal of each hidden decision (the lite tier's `decision_values`), each JSON-encoded: numbers
    # and strings mix, and a table column holds one type. `values()` decodes them. Never shown to the agent.
    decision_values: list[str] = field(default_factory=list)

    def values(self) -> list:
        return [json.loads(v) for v in self.decision_values]

    def to_row(self) -> dict:
        return asdict(self)


def bundled_path(name: str = BUNDLED) -> Path:
    return Path(str(resources.files("sweet.colbench") / "data" / BUNDLED_SETS[name]))


def parse_task(path: Path, row: int, rec: dict, split: str | None) -> Task:
    def need(name: str, kind: type):
        if name not in rec:
            raise ValueError(f"{path}: row {row}: missing field {name!r}")
        if not isinstance(rec[name], kind):
            raise ValueError(f"{path}: row {row}: field {name!r} must be {kind.__name__}, got {type(rec[name]).__name__}")
        return rec[name]

    desc, code = need("problem_description", str), need("ground_truth", str)
    tests = rec.get("test_cases")
    if isinstance(tests, dict):
        tests = list(tests.values())
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"{path}: row {row}: field 'test_cases' must be a non-empty dict or list of call expressions")
    task_split = rec.get("split", split)
    if task_split not in ("train", "test"):
        raise ValueError(f"{path}: row {row}: field 'split' must be 'train' or 'test' (got {task_split!r})")
    task_id = str(rec.get("task_id", f"{task_split}-{row}"))
    decisions = rec.get("decisions", [])
    if not isinstance(decisions, list) or not all(isinstance(d, str) and d.strip() for d in decisions):
        raise ValueError(f"{path}: row {row}: field 'decisions' must be a list of non-empty strings")
    values = rec.get("decision_values", [])
    if not isinstance(values, list) or any(isinstance(v, bool) or not isinstance(v, (int, float, str)) for v in values):
        raise ValueError(f"{path}: row {row}: field 'decision_values' must be a list of numbers or strings")
    return Task(task_id, task_split, desc, code, tests, list(decisions), [json.dumps(v) for v in values])


def select_tasks(tasks: list[Task], n_train: int, n_test: int, seed: int) -> list[Task]:
    """A seeded sample of each split; fewer available than asked is an error, not a silent shrink."""
    out = []
    for split, n in (("train", n_train), ("test", n_test)):
        pool = sorted((t for t in tasks if t.split == split), key=lambda t: t.task_id)
        if len(pool) < n:
            raise ValueError(f"asked for {n} {split} tasks but the source has only {len(pool)}")
        out += sorted(random.Random(f"{seed}-{split}").sample(pool, n), key=lambda t: t.task_id)
    return out
