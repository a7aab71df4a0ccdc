"""Stage 7 — evaluate: the system a method produced (trained actor, critic-picked best-of-N, or the initial policy)
on the held-out tasks, in each of `evaluate.modes`.

Every episode is its own shard keyed by (method, mode, task_id, sample_idx), as in collection, so an interrupted
evaluation resumes. Results go to the store, a markdown table, and MLflow (metrics, table, chart, dialogues).
`compare` gathers every method evaluated on the same tasks under the same protocol into one table.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from sweet import tracking
from sweet.colbench.backend import GENERATION_FAILED
from sweet.stages.collect import (close_models, episode_row, load_chat_models, load_task_pool, new_episode,
                                  run_rollout, shard_name, task_from_row)
from sweet.store import loads, read_rows, read_shards, write_rows


def _half(v: list[float]) -> float:
    """Half-width of a normal-approximation 95% interval of the mean."""
    return 1.96 * statistics.pstdev(v) / math.sqrt(len(v)) if len(v) > 1 else 0.0


def is_frontend(rows: list[dict]) -> bool:
    return bool(rows) and rows[0].get("metric", "tests passed") != "tests passed"


def summarize(rows: list[dict]) -> dict:
    """Backend: % tests passed (mean reward), success rate (all tests pass) and mean turns; frontend: mean page
    similarity (with its metric's name). Normal-approximation 95% intervals over episodes. Episodes that ended on
    an API failure count as 0 and are reported as `failed`."""
    n = len(rows)
    r = [x["reward"] for x in rows]
    s = [float(x["success"]) for x in rows]
    failed = sum((x.get("error") or "").startswith(GENERATION_FAILED) for x in rows)
    if is_frontend(rows):
        return {"n": n, "similarity": statistics.fmean(r) if n else 0.0, "similarity_ci": _half(r) if n else 0.0,
                "metric": rows[0]["metric"], "mean_turns": statistics.fmean(x["n_turns"] for x in rows) if n else 0.0,
                "no_page": sum((x.get("error") or "").startswith("no page") for x in rows), "failed": failed}
    return {"n": n, "tests_passed": 100 * statistics.fmean(r) if n else 0.0, "tests_passed_ci": 100 * _half(r) if n else 0.0,
            "success_rate": 100 * statistics.fmean(s) if n else 0.0, "success_ci": 100 * _half(s) if n else 0.0,
            "mean_turns": statistics.fmean(x["n_turns"] for x in rows) if n else 0.0, "failed": failed}


def summarize_by_method(rows: list[dict], baseline: str = "zero_shot") -> dict[str, dict]:
    """One summary per "<method>/<mode>", in the order the rows first show them. Frontend summaries also carry the
    win rate against `baseline`'s pages in the same mode (per task, mean similarity over samples)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['method']}/{r['mode']}", []).append(r)
    out = {k: summarize(v) for k, v in groups.items()}
    for key, group in groups.items():
        method, _, mode = key.partition("/")
        base = groups.get(f"{baseline}/{mode}")
        if is_frontend(group) and base and method != baseline:
            from sweet.colbench.similarity import win_rate
            w = win_rate(_by_task(group), _by_task(base))
            out[key] |= {"win_rate": 100 * w["win_rate"], "win_rate_lo": 100 * w["ci95"][0],
                         "win_rate_hi": 100 * w["ci95"][1], "win_rate_n": w["n"], "baseline": baseline}
    return out


def _by_task(rows: list[dict]) -> dict[str, float]:
    scores: dict[str, list[float]] = {}
    for r in rows:
        scores.setdefault(r["task_id"], []).append(r["reward"])
    return {k: statistics.fmean(v) for k, v in scores.items()}


def results_table(summaries: dict[str, dict]) -> str:
    if any("similarity" in m for m in summaries.values()):
        return frontend_table(summaries)
    lines = ["| method | mode | % tests passed | success rate | mean turns | episodes | API failures |",
             "|---|---|---|---|---|---|---|"]
    for key, m in summaries.items():
        system, _, mode = key.partition("/")
        lines.append(f"| {system} | {mode or 'multi_turn'} | {m['tests_passed']:.1f} ± {m['tests_passed_ci']:.1f} | "
                     f"{m['success_rate']:.1f} ± {m['success_ci']:.1f} | {m['mean_turns']:.2f} | {m['n']} | "
                     f"{m['failed']} |")
    return "\n".join(lines) + "\n\n(± is a 95% interval over episodes.)\n"


def frontend_table(summaries: dict[str, dict]) -> str:
    first = next(iter(summaries.values()), {})
    metric = first.get("metric", "?")
    base = next((m["baseline"] for m in summaries.values() if "baseline" in m), None)
    lines = [f"| method | mode | similarity ({metric}) | win rate vs {base or '—'} (%) | mean turns | episodes | "
             "no page | API failures |", "|---|---|---|---|---|---|---|---|"]
    for key, m in summaries.items():
        system, _, mode = key.partition("/")
        win = (f"{m['win_rate']:.1f} [{m['win_rate_lo']:.1f}, {m['win_rate_hi']:.1f}]" if "win_rate" in m else "—")
        lines.append(f"| {system} | {mode or 'multi_turn'} | {m['similarity']:.3f} ± {m['similarity_ci']:.3f} | {win} | "
                     f"{m['mean_turns']:.2f} | {m['n']} | {m['no_page']} | {m['failed']} |")
    mixed = {m.get("metric") for m in summaries.values()}
    note = f" Rows scored with different metrics: {sorted(mixed)}." if len(mixed) > 1 else ""
    return ("\n".join(lines) + "\n\n(similarity ± a 95% interval over episodes; win rate = share of held-out tasks "
            "whose page is closer to the reference than the baseline's, ties half, [Wilson 95% interval]. "
            f"Metric '{metric}'{'' if metric.startswith('clip') else ' is not CLIP'}.{note})\n")


def dialogue_sample(rows: list[dict], k: int = 2) -> str:
    """The best and worst evaluation dialogues of each method, readable."""
    parts = []
    for method, mode in sorted({(r["method"], r["mode"]) for r in rows}):
        mine = sorted((r for r in rows if (r["method"], r["mode"]) == (method, mode)),
                      key=lambda r: (-r["reward"], r["task_id"]))
        for label, picked in (("best", mine[:k]), ("worst", mine[-k:][::-1])):
            for r in picked:
                parts.append(f"## {method} ({mode}) — {label} — {r['task_id']} (reward {r['reward']:.2f})\n")
                for m in loads(r["messages"])[1:]:
                    parts.append(f"**{m['role']}**:\n```\n{m['content']}\n```\n")
    return "\n".join(parts)


def _plot(summaries: dict[str, dict]):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3))
    names = list(summaries)
    key = "similarity" if any("similarity" in m for m in summaries.values()) else "tests_passed"
    ax.bar(names, [summaries[n][key] for n in names], yerr=[summaries[n][f"{key}_ci"] for n in names],
           capsize=4, color="#4C72B0")
    if key == "similarity":
        ax.set_ylabel(f"similarity ({next(iter(summaries.values()))['metric']})")
        ax.set_title("Held-out frontend tasks")
    else:
        ax.set_ylabel("% tests passed")
        ax.set_title("Held-out backend tasks")
    fig.tight_layout()
    return fig


def plot_name(summaries: dict[str, dict]) -> str:
    return "similarity.png" if any("similarity" in m for m in summaries.values()) else "tests_passed.png"


def run_systems(cfg, out: Path, tasks: list, systems: dict) -> list[dict]:
    """Evaluate each system (name -> (model ref, adapter), or a function returning (policy, simulator)) in each
    configured mode on `tasks`, resumably.

    Rows carry `method` (the system's name) and `mode`; one shard per (method, mode, task, sample).
    """
    e = cfg.evaluate
    methods = []
    for name, system in systems.items():
        models = None
        for mode in e.modes:
            method = f"{name}/{mode}"
            methods.append(method)
            shards = out / "shards" / method
            todo = [new_episode(cfg, t, i, e.max_turns, mode=mode) for t in tasks for i in range(e.n_samples)
                    if not (shards / shard_name(t.task_id, i)).exists()]
            if not todo:
                continue
            models = models or (system() if callable(system) else
                                load_chat_models(cfg, system[0], adapter=system[1], batch=e.batch_episodes))

            def save(done: list, shards=shards, name=name, mode=mode, method=method) -> None:
                for ep in done:
                    png = getattr(getattr(ep, "answer_render", None), "png", None)
                    if png:  # frontend: the final page, for people browsing the results
                        shot = out / "screenshots" / method / shard_name(ep.task.task_id, ep.sample_idx)
                        shot.parent.mkdir(parents=True, exist_ok=True)
                        shot.with_suffix(".png").write_bytes(png)
                    write_rows([episode_row(ep, method=name, mode=mode)],
                               shards / shard_name(ep.task.task_id, ep.sample_idx))

            run_rollout(cfg, todo, *models, max_new_tokens=e.max_new_tokens, sim_max_new_tokens=e.sim_max_new_tokens,
                        temperature=e.temperature, seed=e.seed, on_done=save, desc=f"evaluate {method}")
        if models:
            close_models(*models)
        del models
    return [r for m in methods for r in sorted(read_shards(out / "shards" / m), key=lambda r: r["traj_id"])]


def report(cfg, out: Path, rows: list[dict], run_id: str | None) -> dict:
    """Table, dialogues and chart on disk and in MLflow; returns the flat metrics."""
    write_rows(rows, out / "eval_results.parquet")
    summaries = summarize_by_method(rows, cfg.frontend.win_rate_baseline)
    table = results_table(summaries)
    (out / "results.md").write_text(table)
    (out / "dialogues.md").write_text(dialogue_sample(rows))
    if run_id:
        tracking.log_text(cfg, run_id, table, "results.md")
        tracking.log_dict(cfg, run_id, summaries, "results.json")
        tracking.log_file(cfg, run_id, out / "dialogues.md")
        tracking.log_figure(cfg, run_id, _plot(summaries), plot_name(summaries))
    return {f"{m}/{k}": v for m, s in summaries.items() for k, v in s.items() if isinstance(v, (int, float))}


def evaluate(cfg, out: Path, tasks_dir: str, system_dir: str | None = None) -> dict:
    """`system_dir`: the actor stage's folder, the critic's (best_of_n) or None (zero_shot, plus `evaluate.agents`)."""
    tasks = [task_from_row(cfg, r) for r in read_rows(Path(tasks_dir) / "tasks.parquet") if r["split"] == "test"]
    m = cfg.method
    if m == "zero_shot":
        systems = {"zero_shot": (cfg.models.policy, None)} | {agent_name(a): (a, None) for a in cfg.evaluate.agents}
    elif system_dir is None:
        raise ValueError(f"method {m!r} evaluates a trained system: give its stage folder")
    elif m == "best_of_n":
        from sweet.stages.best_of_n import load_best_of_n
        systems = {m: lambda: load_best_of_n(cfg, Path(system_dir) / "critic", tasks)}
    else:
        systems = {m: (cfg.models.policy, str(Path(system_dir) / "actor"))}
    rows = run_systems(cfg, out, tasks, systems)
    return report(cfg, out, rows, (out / tracking.RUN_ID_FILE).read_text().strip())


def compare(cfg, tasks_dir: str) -> tuple[list[Path], dict[str, dict]]:
    """Every method evaluated on these tasks with this protocol, policy and simulator (the latest run of each):
    their result files and one summary per (method, mode) — the comparison table's rows."""
    import json

    from sweet.stages import EVALUATE
    from sweet.pipeline import config_slice

    want = {k: v for k, v in config_slice(cfg, EVALUATE.config_keys).items() if k != "method"}
    latest: dict[str, tuple[str, Path]] = {}
    for manifest in sorted((cfg.root / EVALUATE.name).glob("*/manifest.json")):
        m = json.loads(manifest.read_text())
        same = {k: v for k, v in m["config"].items() if k != "method"} == want
        if same and m["inputs"][:1] == [str(tasks_dir)]:
            method = m["config"]["method"]
            if method not in latest or m["finished_at"] > latest[method][0]:
                latest[method] = (m["finished_at"], manifest.parent / "eval_results.parquet")
    files = [latest[k][1] for k in sorted(latest, key=_method_order)]
    rows = [r for f in files for r in read_rows(f)]
    return files, summarize_by_method(rows, cfg.frontend.win_rate_baseline)


def _method_order(method: str) -> tuple[int, str]:
    from sweet.config import METHODS
    return (METHODS.index(method), "") if method in METHODS else (len(METHODS), method)


def agent_name(ref: str) -> str:
    """A short, path-safe system name for a model ref ('api:gpt-4o' -> 'gpt-4o')."""
    ref = ref.removeprefix("api:").split("@", 1)[0].rstrip("/")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", ref.rsplit("/", 1)[-1])


def evaluate_models(cfg, agents: list[str], *, actors: list[str] = (), split: str = "test", n_tasks: int = 0,
                    out: Path | None = None) -> tuple[Path, dict]:
    """Evaluate models zero-shot on ColBench tasks (`cfg.task_family`), outside the training pipeline (`sweet evaluate`).

    Tasks come from `cfg.tasks.source` (e.g. the official test set, first 1,000 rows), the simulator from
    `cfg.models.simulator`, the protocol from `cfg.evaluate`. The output folder is keyed by everything that
    changes the episodes, so a rerun resumes and a changed setting starts afresh.
    """
    import hashlib
    import json

    tasks = [t for t in load_task_pool(cfg) if t.split == split]
    if not tasks:
        raise ValueError(f"task source {cfg.tasks.source!r} has no {split!r} tasks")
    tasks = tasks[:n_tasks] if n_tasks else tasks
    systems: dict[str, tuple[str, str | None]] = {}
    for ref, adapter in [(a, None) for a in agents] + [(cfg.models.policy, str(Path(f).resolve())) for f in actors]:
        if adapter and not Path(adapter).is_dir():
            raise FileNotFoundError(f"actor folder {adapter} does not exist")
        name = f"actor-{agent_name(Path(adapter).parent.name)}" if adapter else agent_name(ref)
        while name in systems:
            name += "_"
        systems[name] = (ref, adapter)
    key = json.dumps({"systems": systems, "tasks": [t.task_id for t in tasks], "source": cfg.tasks.source,
                      "family": cfg.task_family, "frontend": cfg.frontend.model_dump(),
                      "simulator": cfg.models.simulator, "evaluate": cfg.evaluate.model_dump()}, sort_keys=True)
    out = out or cfg.root / "evals" / hashlib.sha256(key.encode()).hexdigest()[:12]
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / tracking.RUN_ID_FILE
    if run_file.exists():
        run_id = run_file.read_text().strip()
    else:
        run_id = tracking.start_parent_run(cfg, None, "evaluate-models")
        run_file.write_text(run_id)
        tracking.log_params(cfg, run_id, {"eval.systems": ",".join(systems), "eval.split": split,
                                          "eval.n_tasks": len(tasks)})
    rows = run_systems(cfg, out, tasks, systems)
    metrics = report(cfg, out, rows, run_id)
    tracking.log_metrics(cfg, run_id, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    tracking.end_run(cfg, run_id)
    return out, metrics
