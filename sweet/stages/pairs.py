"""Stage 3 — build preference pairs: for each task, a higher-reward trajectory (chosen, τ⁺) against a
lower-reward one (rejected, τ⁻). The training-time information c (the reference code) travels with the pair."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from sweet.records import Pair
from sweet.store import read_rows, write_rows


def _row(task_id: str, hi: dict, lo: dict) -> dict:
    return asdict(Pair(pair_id=f"{hi['traj_id']}>{lo['traj_id']}", task_id=task_id, chosen_traj_id=hi["traj_id"],
                       rejected_traj_id=lo["traj_id"], chosen_reward=hi["reward"], rejected_reward=lo["reward"],
                       chosen_messages=hi["messages"], rejected_messages=lo["messages"],
                       training_info=hi["training_info"]))


def make_pairs(trajs: list[dict], min_margin: float, max_pairs_per_task: int, rule: str = "margin") -> list[dict]:
    """Trajectory preference pairs per task.

    official: only tasks where some trajectory passes every test (reward 1); chosen = the best (first such sample),
              rejected = each trajectory with a strictly lower reward (the released evaluate_code.py rule).
    margin:   every pair whose rewards differ by at least `min_margin`, widest margins first.
    Both keep at most `max_pairs_per_task` per task (0 = all of them).
    """
    if rule not in ("official", "margin"):
        raise ValueError(f"unknown pair rule {rule!r}; use 'official' or 'margin'")
    by_task: dict[str, list[dict]] = defaultdict(list)
    for t in trajs:
        by_task[t["task_id"]].append(t)
    rows = []
    for task_id in sorted(by_task):
        group = sorted(by_task[task_id], key=lambda t: (-t["reward"], t["sample_idx"]))
        if rule == "official":
            best = group[0]
            cands = [(best, lo) for lo in group[1:] if lo["reward"] < best["reward"]] if best["reward"] >= 1.0 else []
        else:
            cands = [(hi, lo) for hi, lo in itertools.combinations(group, 2)
                     if hi["reward"] - lo["reward"] >= min_margin and hi["reward"] > lo["reward"]]
        # Widest margins first: the clearest preferences are kept when the cap bites.
        cands.sort(key=lambda p: (-(p[0]["reward"] - p[1]["reward"]), p[0]["sample_idx"], p[1]["sample_idx"]))
        rows += [_row(task_id, hi, lo) for hi, lo in cands[:max_pairs_per_task or None]]
    return rows


def build_preference_pairs(cfg, out: Path, trajs_dir: str) -> dict:
    trajs = read_rows(Path(trajs_dir) / "trajectories.parquet")
    rows = make_pairs(trajs, cfg.pairs.min_margin, cfg.pairs.max_pairs_per_task, cfg.pairs.rule)
    write_rows(rows, out / "pairs.parquet")
    return {"pairs": len(rows), "tasks_with_pairs": len({r["task_id"] for r in rows}),
            "mean_margin": sum(r["chosen_reward"] - r["rejected_reward"] for r in rows) / len(rows) if rows else 0.0}
