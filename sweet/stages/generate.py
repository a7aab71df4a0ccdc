"""Stage 1 — generate tasks: pick the train and held-out tasks of this experiment (backend or frontend family).

With `tasks.generator` set, an LLM first writes new tasks from seed texts, as in the paper (a reference function,
a description with its signature, 10 test calls); only tasks whose reference runs all its tests in the sandbox
and that are not near-duplicates are kept. The generated set is also written as a ColBench jsonl for reuse.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sweet.colbench.registry import family
from sweet.colbench.sources import load_tasks
from sweet.colbench.tasks import select_tasks
from sweet.store import write_rows


def generate_tasks(cfg, out: Path) -> dict:
    t = cfg.tasks
    summary: dict = {}
    if t.generator:
        pool, stats = _generate(cfg, out)
        summary |= {f"generation/{k}": v for k, v in stats.items() if isinstance(v, (int, float))}
    else:
        pool = family(cfg).load_pool(cfg)
    tasks = select_tasks(pool, t.n_train, t.n_test, t.seed)
    write_rows([x.to_row() for x in tasks], out / "tasks.parquet")
    return summary | {"n_train": sum(x.split == "train" for x in tasks), "n_test": sum(x.split == "test" for x in tasks)}


def _generate(cfg, out: Path):
    from sweet.agents import load_chat
    from sweet.colbench import taskgen

    t = cfg.tasks
    # Existing tasks are only a dedup reference: a generated task must not copy a known one.
    existing = load_tasks(t.source, first_n_test=t.first_n_test)
    generator = load_chat(t.generator, cfg)
    tasks, stats = taskgen.generate_tasks(generator, taskgen.load_seeds(t.seeds or None), t.n_train + t.n_test,
                                          temperature=t.gen_temperature, max_new_tokens=t.gen_max_new_tokens,
                                          existing=existing)
    if len(tasks) < t.n_train + t.n_test:
        raise ValueError(f"task generation kept {len(tasks)} of the {t.n_train + t.n_test} tasks asked "
                         f"(stats: {json.dumps(stats)}); try more seeds (tasks.seeds) or another generator")
    # Held-out tasks: the first n_test by id, a hash of the description (so neither position nor seed order decides).
    test_ids = {x.task_id for x in sorted(tasks, key=lambda x: x.task_id)[:t.n_test]}
    tasks = [dataclasses.replace(x, split="test" if x.task_id in test_ids else "train") for x in tasks]
    with open(out / "generated_tasks.jsonl", "w") as f:
        for x in tasks:
            f.write(json.dumps(x.to_row()) + "\n")
    (out / "generation_stats.json").write_text(json.dumps(stats, indent=2))
    return tasks, stats
