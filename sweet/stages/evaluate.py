"""Stage 7 — evaluate: the system a method produced (trained actor, critic-picked best-of-N, or the initial policy)
on the held-out tasks, in each of `evaluate.modes`.

Every episode is its own shard keyed by (method, mode, task_id, sample_idx), as in collection, so an interrupted
evaluation resumes. Results go to the store, a markdown table, and MLflow (metrics, table, chart, dialogues): see
`sweet.stages.report`, which also gathers every method evaluated on the same tasks under the same protocol
into one table (`compare`).
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from sweet import tracking
from sweet.colbench.registry import family
from sweet.models import trained_actor
from sweet.records import EvalResult
from sweet.stages.collect import close_models, load_chat_models
from sweet.stages.diagnostics import critic_diagnostics, upstream
from sweet.stages.report import write_report
from sweet.store import Shards


DIAGNOSTIC_TAG = "-diagnostic"  # shards/<name>/<mode>-diagnostic: the critic diagnostics' extra episodes


def run_systems(cfg, out: Path, tasks: list, systems: dict, diagnose: tuple[str, str] | None = None) -> list[dict]:
    """Evaluate each system (name -> (model ref, adapter), or a function returning (policy, simulator)) in each
    configured mode on `tasks`, resumably. `diagnose` = (name, mode): that system also rolls out the critic
    diagnostics' extra episodes (`diagnostic_episodes`) in the same model load.

    Rows carry `method` (the system's name) and `mode`; one shard per (method, mode, task, sample).
    """
    methods = []
    for name, system in systems.items():
        methods += [f"{name}/{mode}" for mode in cfg.evaluate.modes]
        models = _evaluate_system(cfg, out, tasks, name, system)
        if diagnose and diagnose[0] == name:
            models = diagnostic_episodes(cfg, out, tasks, name, system, diagnose[1], models)
        if models:  # a llama-server or vLLM engine is released before the next system loads its own
            close_models(*models)
    return [r for m in methods for r in _read(out / "shards" / m)]


def _read(shard_dir: Path) -> list[dict]:
    return sorted(Shards(shard_dir).read_all(), key=lambda r: r["traj_id"])


def _evaluate_system(cfg, out: Path, tasks: list, name: str, system, modes: list[str] | None = None,
                     samples: range | None = None, tag: str = "", models: tuple | None = None) -> tuple | None:
    """Roll out one system's missing episodes (samples `samples`, default the table's `evaluate.n_samples`) in every
    mode of `modes`, into `shards/<name>/<mode><tag>`; returns its models (`models` if given, else loaded once on
    first need; closed here if a rollout fails, else by the caller)."""
    e, fam = cfg.evaluate, family(cfg)
    samples = samples if samples is not None else range(e.n_samples)
    try:
        for mode in modes or e.modes:
            method = f"{name}/{mode}{tag}"
            shards = Shards(out / "shards" / method)
            todo = [fam.episode(t, i, e.max_turns, mode=mode, scoring=e.scoring, sim_view=cfg.backend.simulator_view,
                                agent_view=cfg.agent_view, prefill=cfg.backend.answer_prefill)
                    for t in tasks for i in samples if not shards.done((t.task_id, i))]
            if not todo:
                continue
            models = models or (system() if callable(system) else
                                load_chat_models(cfg, system[0], adapter=system[1], batch=e.batch_episodes))

            def save(done: list, shards=shards, name=name, mode=mode, method=method) -> None:
                for ep in done:
                    key = (ep.task.task_id, ep.sample_idx)
                    png = getattr(getattr(ep, "answer_render", None), "png", None)
                    if png:  # frontend: the final page, for people browsing the results
                        shot = (out / "screenshots" / method / Shards.name(key)).with_suffix(".png")
                        shot.parent.mkdir(parents=True, exist_ok=True)
                        shot.write_bytes(png)
                    shards.write(key, [asdict(EvalResult.of_episode(ep, method=name, mode=mode))])

            fam.rollout(todo, *models, max_new_tokens=e.max_new_tokens, sim_max_new_tokens=e.sim_max_new_tokens,
                        temperature=e.temperature, seed=e.seed, on_done=save, desc=f"evaluate {method}")
    except BaseException:
        if models:
            close_models(*models)
        raise
    return models


def evaluate(cfg, out: Path, tasks_dir: str, system_dir: str | None = None) -> dict:
    """`system_dir`: the actor stage's folder, the critic's (best_of_n) or None (zero_shot, plus `evaluate.agents`)."""
    tasks = family(cfg).read_tasks(tasks_dir, "test")
    m = cfg.method
    if m == "zero_shot":
        systems = {"zero_shot": (cfg.models.policy, None)} | {agent_name(a): (a, None) for a in cfg.evaluate.agents}
    elif system_dir is None:
        raise ValueError(f"method {m!r} evaluates a trained system: give its stage folder")
    elif m == "best_of_n":
        from sweet.stages.best_of_n import load_best_of_n
        systems = {m: lambda: load_best_of_n(cfg, Path(system_dir) / "critic", tasks)}
    else:
        systems = {m: trained_actor(cfg.models.policy, Path(system_dir) / "actor")}
    critic_dir = upstream(system_dir, "train_critic") if system_dir else None
    trained_critic = critic_dir is not None and (critic_dir / "critic").is_dir()
    mode = "multi_turn" if "multi_turn" in cfg.evaluate.modes else cfg.evaluate.modes[0]
    rows = run_systems(cfg, out, tasks, systems, diagnose=(m, mode) if trained_critic else None)
    run_id = (out / tracking.RUN_ID_FILE).read_text().strip()
    metrics = write_report(cfg, out, rows, run_id, tasks=tasks)
    if trained_critic:  # the method trained a critic: how good is it?
        own = [r for r in rows if r["method"] == m and r["mode"] == mode]
        own += _read(out / "shards" / f"{m}/{mode}{DIAGNOSTIC_TAG}")
        metrics |= critic_diagnostics(cfg, out, own, critic_dir / "critic", run_id)
    return metrics


def diagnostic_episodes(cfg, out: Path, tasks: list, name: str, system, mode: str,
                        models: tuple | None = None) -> tuple | None:
    """More episodes of the evaluated system for the critic's best-of-N curve: samples `n_samples` up to
    `evaluate.diagnostic_samples` on the first `evaluate.diagnostic_tasks` held-out tasks, into
    `shards/<name>/<mode>-diagnostic`. Kept apart from the table's shards, so the table and its paired comparison
    weigh every task alike. Reuses `models` when given (the table's load); returns the models it used."""
    e = cfg.evaluate
    if e.diagnostic_samples <= e.n_samples:
        return models
    some = tasks[:e.diagnostic_tasks] if e.diagnostic_tasks else tasks
    return _evaluate_system(cfg, out, some, name, system, modes=[mode],
                            samples=range(e.n_samples, e.diagnostic_samples), tag=DIAGNOSTIC_TAG, models=models)


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

    tasks = [t for t in family(cfg).load_pool(cfg) if t.split == split]
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
        systems[name] = trained_actor(ref, adapter) if adapter else (ref, None)
    key = json.dumps({"systems": systems, "tasks": [t.task_id for t in tasks], "source": cfg.tasks.source,
                      "family": cfg.task_family, "frontend": cfg.frontend.model_dump(),
                      "simulator": cfg.models.simulator,  # the diagnostic settings are unused here
                      "evaluate": cfg.evaluate.model_dump(exclude={"diagnostic_samples", "diagnostic_tasks"}),
                      # absent at its default, so folders evaluated before the setting existed are still found
                      **({"backend": cfg.backend.model_dump()} if cfg.backend != type(cfg.backend)() else {})},
                     sort_keys=True)
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
    # Backend: the first system given is the one the others are paired with (e.g. the base policy, then its trained
    # actor). Frontend: win rates stay against `frontend.win_rate_baseline`, as configured.
    first = next(iter(systems)) if cfg.task_family == "backend" else None
    metrics = write_report(cfg, out, rows, run_id, baseline=first, tasks=tasks)
    tracking.log_metrics(cfg, run_id, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    tracking.end_run(cfg, run_id)
    return out, metrics
