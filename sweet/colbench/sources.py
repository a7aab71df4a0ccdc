"""Where backend tasks come from: the bundled sets, a file or folder in the official record format, or the official
data (`official:<folder>`, `hub:<dataset id>`). One entry point, `load_tasks`, so the record format (`tasks.py`)
and the official dataset's reader (`official.py`) need not know each other."""

from __future__ import annotations

from pathlib import Path

from sweet.colbench.tasks import BUNDLED, BUNDLED_SETS, Task, bundled_path, parse_task
from sweet.store import iter_jsonl

OFFICIAL_PREFIXES = ("official:", "hub:")


def load_tasks(source: str = BUNDLED, first_n_test: int | None = 1000) -> list[Task]:
    """Tasks of a source; `first_n_test` keeps the first N test rows of official sources only (paper: 1000)."""
    if source.startswith(OFFICIAL_PREFIXES):
        from sweet.colbench.official import load_official_tasks

        kind, target = source.split(":", 1)
        if not target:
            raise ValueError(f"task source {source!r}: name a {'folder' if kind == 'official' else 'dataset id'} "
                             f"after '{kind}:'")
        if kind == "official" and not Path(target).expanduser().is_dir():
            raise FileNotFoundError(f"task source {source!r}: no such folder (a copy of the official dataset, "
                                    f"holding backend_tasks/train.jsonl and backend_tasks/test.jsonl)")
        return load_official_tasks(target, first_n_test=first_n_test)
    if source in BUNDLED_SETS:
        files = [(bundled_path(source), None)]
    else:
        p = Path(source)
        if p.is_dir():
            files = [(p / "train.jsonl", "train"), (p / "test.jsonl", "test")]
            missing = [str(f) for f, _ in files if not f.exists()]
            if missing:
                raise FileNotFoundError(f"task folder {p} lacks {', '.join(missing)}")
        elif p.exists():
            files = [(p, None)]
        else:
            raise FileNotFoundError(f"task source {source!r}: no such file or folder "
                                    f"(use one of {sorted(BUNDLED_SETS)}, a path, "
                                    f"'official:<folder>' or 'hub:<dataset id>')")
    tasks, seen = [], set()
    for f, split in files:
        for row, rec in iter_jsonl(f):
            t = parse_task(f, row, rec, split)
            if t.task_id in seen:
                raise ValueError(f"{f}: row {row}: duplicate task_id {t.task_id!r}")
            seen.add(t.task_id)
            tasks.append(t)
    return tasks
