"""Stage 1 — generate tasks: pick the train and held-out backend tasks of this experiment."""

from __future__ import annotations

from pathlib import Path

from sweet.colbench.tasks import load_tasks, select_tasks
from sweet.store import write_rows


def generate_tasks(cfg, out: Path) -> dict:
    tasks = select_tasks(load_tasks(cfg.tasks.source), cfg.tasks.n_train, cfg.tasks.n_test, cfg.tasks.seed)
    write_rows([t.to_row() for t in tasks], out / "tasks.parquet")
    return {"n_train": sum(t.split == "train" for t in tasks), "n_test": sum(t.split == "test" for t in tasks)}
