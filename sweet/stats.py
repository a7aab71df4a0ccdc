"""Small, dependency-free statistics for comparing systems on the same held-out tasks.

Tasks are the unit: each system's episodes of one task are averaged first (several samples per task), then a
system is compared with a baseline task by task (paired), and the uncertainty of the mean difference is a
percentile bootstrap over tasks (resampling tasks, not episodes, since episodes of one task are not independent).
"""

from __future__ import annotations

import random
import statistics


def per_task_mean(rows: list[dict], key: str) -> dict[str, float]:
    """Mean of `key` over each task's episodes (booleans count as 0/1)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["task_id"], []).append(float(r[key]))
    return {t: statistics.fmean(v) for t, v in by.items()}


def paired_bootstrap(system: dict[str, float], baseline: dict[str, float], *, n_boot: int = 4000,
                     seed: int = 0, level: float = 0.95) -> dict:
    """Mean over shared tasks of system - baseline, with a percentile bootstrap interval (tasks resampled with
    replacement, `n_boot` times, seeded). Tasks only one side has are left out and counted in `unpaired`."""
    tasks = sorted(set(system) & set(baseline))
    unpaired = len(set(system) ^ set(baseline))
    if not tasks:
        return {"diff": 0.0, "lo": 0.0, "hi": 0.0, "n_tasks": 0, "unpaired": unpaired}
    d = [system[t] - baseline[t] for t in tasks]
    rng = random.Random(seed)
    n = len(d)
    means = sorted(statistics.fmean(rng.choices(d, k=n)) for _ in range(n_boot))
    lo_i = int((1 - level) / 2 * n_boot)
    hi_i = min(n_boot - 1, int((1 + level) / 2 * n_boot))
    return {"diff": statistics.fmean(d), "lo": means[lo_i], "hi": means[hi_i], "n_tasks": n, "unpaired": unpaired}
