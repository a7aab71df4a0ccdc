"""Stage 7 — evaluate: the initial policy (zero_shot) and the trained actor (sweet) on the held-out tasks.

Every episode is its own shard keyed by (method, task_id, sample_idx), as in collection, so an interrupted
evaluation resumes. Results go to the store, a markdown table, and MLflow (metrics, table, chart, dialogues).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from sweet import tracking
from sweet.colbench.backend import Episode, rollout
from sweet.colbench.tasks import Task
from sweet.stages.collect import episode_row, load_chat_models, shard_name
from sweet.store import loads, read_rows, read_shards, write_rows


def summarize(rows: list[dict]) -> dict:
    """Mean % tests passed and success rate with a normal-approximation 95% interval over episodes."""
    n = len(rows)
    r = [x["reward"] for x in rows]
    s = [float(x["success"]) for x in rows]
    half = lambda v: 1.96 * statistics.pstdev(v) / math.sqrt(len(v)) if len(v) > 1 else 0.0  # noqa: E731
    return {"n": n, "tests_passed": 100 * statistics.fmean(r) if n else 0.0, "tests_passed_ci": 100 * half(r) if n else 0.0,
            "success_rate": 100 * statistics.fmean(s) if n else 0.0, "success_ci": 100 * half(s) if n else 0.0,
            "mean_turns": statistics.fmean(x["n_turns"] for x in rows) if n else 0.0}


def results_table(summaries: dict[str, dict]) -> str:
    lines = ["| method | % tests passed | success rate | mean turns | episodes |", "|---|---|---|---|---|"]
    for method, m in summaries.items():
        lines.append(f"| {method} | {m['tests_passed']:.1f} ± {m['tests_passed_ci']:.1f} | "
                     f"{m['success_rate']:.1f} ± {m['success_ci']:.1f} | {m['mean_turns']:.2f} | {m['n']} |")
    return "\n".join(lines) + "\n\n(± is a 95% interval over episodes.)\n"


def dialogue_sample(rows: list[dict], k: int = 2) -> str:
    """The best and worst evaluation dialogues of each method, readable."""
    parts = []
    for method in sorted({r["method"] for r in rows}):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: (-r["reward"], r["task_id"]))
        for label, picked in (("best", mine[:k]), ("worst", mine[-k:][::-1])):
            for r in picked:
                parts.append(f"## {method} — {label} — {r['task_id']} (reward {r['reward']:.2f})\n")
                for m in loads(r["messages"])[1:]:
                    parts.append(f"**{m['role']}**:\n```\n{m['content']}\n```\n")
    return "\n".join(parts)


def _plot(summaries: dict[str, dict]):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3))
    names = list(summaries)
    ax.bar(names, [summaries[n]["tests_passed"] for n in names], yerr=[summaries[n]["tests_passed_ci"] for n in names],
           capsize=4, color="#4C72B0")
    ax.set_ylabel("% tests passed")
    ax.set_title("Held-out backend tasks")
    fig.tight_layout()
    return fig


def evaluate(cfg, out: Path, tasks_dir: str, actor_dir: str) -> dict:
    e = cfg.evaluate
    tasks = [Task(**r) for r in read_rows(Path(tasks_dir) / "tasks.parquet") if r["split"] == "test"]
    systems = {"zero_shot": None, "sweet": str(Path(actor_dir) / "actor")}
    for method, adapter in systems.items():
        shards = out / "shards" / method
        todo = [Episode(t, i, e.max_turns) for t in tasks for i in range(e.n_samples)
                if not (shards / shard_name(t.task_id, i)).exists()]
        if not todo:
            continue
        policy, simulator = load_chat_models(cfg, cfg.models.policy, adapter=adapter, batch=e.batch_episodes)

        def save(done: list[Episode], shards=shards, method=method) -> None:
            for ep in done:
                write_rows([episode_row(ep, method=method)], shards / shard_name(ep.task.task_id, ep.sample_idx))

        rollout(todo, policy, simulator, max_new_tokens=e.max_new_tokens, sim_max_new_tokens=e.sim_max_new_tokens,
                temperature=e.temperature, seed=e.seed, on_done=save, desc=f"evaluate {method}")
        del policy, simulator
    rows = [r for m in systems for r in sorted(read_shards(out / "shards" / m), key=lambda r: r["traj_id"])]
    write_rows(rows, out / "eval_results.parquet")
    summaries = {m: summarize([r for r in rows if r["method"] == m]) for m in systems}
    table = results_table(summaries)
    (out / "results.md").write_text(table)
    (out / "dialogues.md").write_text(dialogue_sample(rows))
    run_id = (out / tracking.RUN_ID_FILE).read_text().strip()
    tracking.log_text(cfg, run_id, table, "results.md")
    tracking.log_dict(cfg, run_id, summaries, "results.json")
    tracking.log_file(cfg, run_id, out / "dialogues.md")
    tracking.log_figure(cfg, run_id, _plot(summaries), "tests_passed.png")
    return {f"{m}/{k}": v for m, s in summaries.items() for k, v in s.items()}
