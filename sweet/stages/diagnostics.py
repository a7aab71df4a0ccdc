"""Critic diagnostics on held-out episodes, written by the evaluate stage of every method that trained a critic.

The critic never saw these tasks: its training pairs came from the train split. Two questions, both on the
evaluated system's own held-out episodes (several per task: `evaluate.n_samples`, and up to
`evaluate.diagnostic_samples` on the first `evaluate.diagnostic_tasks` tasks, drawn for the curve alone):
- **held-out pair accuracy**: of every two episodes of one task whose rewards differ by at least `pairs.min_margin`,
  how often the critic scores the better one higher (ties count half; 0.5 is chance);
- **best-of-N**: the expected reward when the critic picks one of N episodes drawn at random from a task's samples,
  for N = 1, 2, 4, 8 (as far as the samples go, and N = all of them; on the tasks with the most samples), beside a
  random pick (N = 1) and an oracle that knows the rewards.
  The critic reads the hidden reference c here as in training: this measures the critic, not a deployable agent.

Only tasks whose episodes differ in reward are scored: on the others every pick has the same reward.
"""

from __future__ import annotations

import itertools
import json
from math import comb
from pathlib import Path

from tqdm.auto import tqdm

from sweet import tracking
from sweet.pipeline import MANIFEST, read_manifest
from sweet.stats import paired_bootstrap
from sweet.store import loads

BEST_OF = (1, 2, 4, 8)
OUT_FILE = "critic_diagnostics.json"
PLOT_FILE = "best_of_n.png"


def upstream(stage_dir: str | Path, stage: str) -> Path | None:
    """The folder of `stage` among `stage_dir` and the stages it was built from (manifests' inputs), or None."""
    todo, seen = [Path(stage_dir)], set()
    while todo:
        d = todo.pop()
        if d in seen or not (d / MANIFEST).exists():
            continue
        seen.add(d)
        m = read_manifest(d)
        if m.get("stage") == stage:
            return d
        todo += [Path(p) for p in m.get("inputs", [])]
    return None


def expected_pick(rewards: list[float], n: int) -> float:
    """Expected reward of the first of `rewards` (already in pick order) among a uniformly random n-subset: the item
    at rank i is picked when it is drawn and none of the i before it is, C(m-1-i, n-1) / C(m, n)."""
    m = len(rewards)
    return sum(r * comb(m - 1 - i, n - 1) for i, r in enumerate(rewards)) / comb(m, n)


def ordered(score_hi: float, score_lo: float) -> float:
    """1 when the critic scores the better trajectory higher, 0 when lower, 0.5 on a tie."""
    return 1.0 if score_hi > score_lo else 0.5 if score_hi == score_lo else 0.0


def pair_accuracy(groups: dict[str, list[dict]], scores: dict[str, float], min_margin: float) -> dict:
    """Share of within-task pairs (rewards at least `min_margin` apart) the critic orders right; per-task shares
    with a bootstrap interval over tasks (against 0.5, chance)."""
    per_task: dict[str, float] = {}
    n_pairs = 0
    for task_id, eps in groups.items():
        hits = []
        for a, b in itertools.combinations(eps, 2):
            if abs(a["reward"] - b["reward"]) >= min_margin:
                hi, lo = (a, b) if a["reward"] > b["reward"] else (b, a)
                hits.append(ordered(scores[hi["traj_id"]], scores[lo["traj_id"]]))
        if hits:
            per_task[task_id], n_pairs = sum(hits) / len(hits), n_pairs + len(hits)
    ci = paired_bootstrap(per_task, {t: 0.5 for t in per_task}) if per_task else {}
    return {"pairs": n_pairs, "tasks": len(per_task),
            "accuracy": sum(per_task.values()) / len(per_task) if per_task else None,
            "accuracy_ci": [0.5 + ci["lo"], 0.5 + ci["hi"]] if ci else None}


def best_of_n(groups: dict[str, list[dict]], scores: dict[str, float]) -> dict:
    """Mean over tasks of the expected reward of the critic's pick (and of an oracle's) among N random samples.

    On the tasks with the most samples (`evaluate.diagnostic_samples` draws more on a few), so every point of the
    curve averages the same tasks; `tasks` says how many."""
    m = max(len(eps) for eps in groups.values())
    full = [eps for eps in groups.values() if len(eps) == m]
    curve = {}
    for n in sorted({n for n in BEST_OF if n <= m} | {m}):  # and N = every sample, when that is not a power of 2
        critic, oracle = [], []
        for eps in full:
            by_score = sorted(eps, key=lambda e: (-scores.get(e["traj_id"], 0.0), e["sample_idx"]))
            critic.append(expected_pick([e["reward"] for e in by_score], n))
            oracle.append(expected_pick(sorted((e["reward"] for e in eps), reverse=True), n))
        curve[n] = {"critic": sum(critic) / len(critic), "oracle": sum(oracle) / len(oracle), "tasks": len(full)}
    return curve


def critic_diagnostics(cfg, out: Path, rows: list[dict], critic_dir: Path, run_id: str | None) -> dict:
    """Score `rows` (one system's held-out episodes, one mode) with the critic in `critic_dir`, write
    `critic_diagnostics.json` and `best_of_n.png` into `out`, log them to MLflow; returns the metrics."""
    from sweet.algos.scoring import load_any_critic, score_trajectory_any  # lazily: loads torch

    if (out / OUT_FILE).exists():
        return json.loads((out / OUT_FILE).read_text())["metrics"]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["task_id"], []).append(r)
    varied = [r for eps in groups.values() if len({e["reward"] for e in eps}) > 1 for r in eps]
    scores: dict[str, float] = {}
    if varied:
        from sweet.stages.candidates import critic_screens
        critic = load_any_critic(critic_dir, cfg.models.device, screenshots=critic_screens(cfg))
        try:
            for r in tqdm(varied, desc="critic diagnostics", unit="ep"):
                scores[r["traj_id"]] = score_trajectory_any(critic, loads(r["messages"]), r["training_info"])
        finally:
            if critic.screenshots is not None:
                critic.screenshots.close()
    acc = pair_accuracy(groups, scores, cfg.pairs.min_margin)
    curve = best_of_n(groups, scores) if groups else {}
    metrics = {"critic_heldout_pairs": acc["pairs"], **({"critic_heldout_pair_accuracy": acc["accuracy"]}
                                                        if acc["accuracy"] is not None else {}),
               **{f"best_of_{n}_reward": v["critic"] for n, v in curve.items()},
               **{f"oracle_of_{n}_reward": v["oracle"] for n, v in curve.items()}}
    report = {"critic": str(critic_dir), "episodes": len(rows), "scored": len(scores), "pair_accuracy": acc,
              "best_of_n": curve, "metrics": metrics}
    (out / OUT_FILE).write_text(json.dumps(report, indent=1))
    md = markdown(report)
    results = out / "results.md"
    if results.exists():  # beside the method's table, for people reading results.md
        results.write_text(results.read_text().rstrip() + "\n\n" + md)
    if curve:
        _plot(curve, out / PLOT_FILE)
    if run_id:
        tracking.log_metrics(cfg, run_id, metrics)
        for n, v in curve.items():  # the curve as a metric series too (x = N)
            tracking.log_metrics(cfg, run_id, {"best_of_n_reward": v["critic"]}, step=n)
        tracking.log_file(cfg, run_id, out / OUT_FILE)
        tracking.log_text(cfg, run_id, md, "critic_diagnostics.md")
        if curve:
            tracking.log_file(cfg, run_id, out / PLOT_FILE)
    return metrics


def markdown(report: dict) -> str:
    """The diagnostics as a short markdown section."""
    acc, curve = report["pair_accuracy"], report["best_of_n"]
    ci = acc["accuracy_ci"]
    lines = ["### Critic diagnostics (held-out episodes of this system)", "",
             "Pair accuracy on held-out tasks: " + (f"{acc['accuracy']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
                                                      if acc["accuracy"] is not None else "no pairs") +
             f" ({acc['pairs']} pairs from {acc['tasks']} tasks; 0.5 is chance).", ""]
    if curve:
        tasks = next(iter(curve.values())).get("tasks")
        lines += [f"Best-of-N on {tasks} held-out tasks with {max(curve)} samples each:" if tasks else "Best-of-N:", "",
                  "| N | critic's pick | oracle |", "|---|---|---|"]
        lines += [f"| {n} | {v['critic']:.3f} | {v['oracle']:.3f} |" for n, v in sorted(curve.items())]
        lines += ["", "Mean reward of the critic's pick among N random held-out samples per task (N = 1: a random "
                  "pick); the critic reads the hidden reference, as in training."]
    return "\n".join(lines) + "\n"


def _plot(curve: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted(curve)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot(ns, [curve[n]["critic"] for n in ns], "o-", label="critic's pick")
    ax.plot(ns, [curve[n]["oracle"] for n in ns], "s--", label="oracle (best reward)")
    ax.axhline(curve[ns[0]]["critic"], color="grey", lw=0.8, label="random pick")
    ax.set(xscale="log", xticks=ns, xticklabels=[str(n) for n in ns], xlabel="N (held-out samples per task)",
           ylabel="mean reward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
