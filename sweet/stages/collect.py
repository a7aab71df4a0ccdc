"""Stage 2 — collect trajectories: k episodes per training task with the initial policy.

Each finished episode is written at once as its own shard, keyed by (task_id, sample_idx): a run killed halfway
keeps its finished episodes and the rerun collects only the missing ones.

The same files let the rollout fan out: `collect_shard(..., shard, n_shards)` rolls out the episodes of one of
`n_shards` disjoint subsets of the training tasks (each may run on another machine, writing into the same
`shards/` folder), and `finish_collection` then writes the stage's tables, as the single-process stage does.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from pathlib import Path

from sweet.agents import load_chat
from sweet.colbench.backend import ANSWER_MARK
from sweet.colbench.registry import family
from sweet.records import Trajectory, turns_of
from sweet.store import Shards, loads, write_rows


def load_chat_models(cfg, policy_ref: str, adapter=None, batch: int = 16):
    """Policy and simulator; one model serves both when they are the same plain checkpoint. Frontend: the
    simulator is a `FrontendEnv` (see `colbench.registry`)."""
    policy = load_chat(policy_ref, cfg, batch=batch, adapter=adapter)
    shared = policy if adapter is None and cfg.models.simulator == policy_ref else None
    return policy, family(cfg).simulator(cfg, lambda spec: load_chat(spec, cfg, batch=batch), shared)


def close_models(*models) -> None:
    """Release what holds a process or a connection (a browser, an HTTP client); torch models are just dropped."""
    for m in models:
        close = getattr(m, "close", None)
        if close is not None:
            close()


def used_marker(traj: dict) -> bool:
    return any(m["role"] == "assistant" and ANSWER_MARK.lower() in m["content"].lower() for m in loads(traj["messages"]))


def import_offline(cfg, out: Path) -> list[dict]:
    """The official offline trajectories instead of a rollout; rows without a reward are scored in the sandbox
    with `evaluate.scoring` (the others keep the released evaluation's, which the `scoring` column says)."""
    from sweet.colbench.official import read_offline_trajectories
    from sweet.sandbox import evaluate_many

    c = cfg.collect
    tasks, rows = read_offline_trajectories(c.offline_path, limit=c.offline_limit or None,
                                             agent_view=cfg.agent_view)
    by_id = {t.task_id: t for t in tasks}
    todo = [r for r in rows if r["reward"] is None]
    if todo:
        reports = evaluate_many([(r["answer"], by_id[r["task_id"]].ground_truth, by_id[r["task_id"]].test_cases)
                                 for r in todo], scoring=cfg.evaluate.scoring)
        for r, rep in zip(todo, reports):
            r.update(reward=rep.reward, success=rep.success, tests_passed=rep.passed, error=rep.error,
                     scoring=cfg.evaluate.scoring)
    write_rows([t.to_row() for t in tasks], out / "offline_tasks.parquet")
    return rows


def collect_trajectories(cfg, out: Path, tasks_dir: str) -> dict:
    c = cfg.collect
    if c.offline_path:
        trajs = sorted(import_offline(cfg, out), key=lambda r: (r["task_id"], r["sample_idx"]))
        return _finish(out, trajs, resumed=0)
    done = collect_shard(cfg, out, tasks_dir)
    return finish_collection(out, collected=done["collected"])


def shard_tasks(tasks: list, shard: int, n_shards: int) -> list:
    """Shard `shard` of `n_shards`: every n-th training task (in tasks.parquet order), so shards are disjoint,
    cover every task and hold all k episodes of a task together."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} is not one of 0..{n_shards - 1}")
    return tasks[shard::n_shards]


def pending_episodes(cfg, out: Path, tasks_dir: str, shard: int = 0, n_shards: int = 1) -> list:
    """The episodes of this shard's tasks that have no file under `<out>/shards/` yet."""
    c, fam = cfg.collect, family(cfg)
    shards = Shards(Path(out) / "shards")
    return [fam.episode(t, i, c.max_turns, scoring=cfg.evaluate.scoring, sim_view=cfg.backend.simulator_view,
                        agent_view=cfg.agent_view, prefill=cfg.backend.answer_prefill)
            for t in shard_tasks(fam.read_tasks(tasks_dir, "train"), shard, n_shards)
            for i in range(c.k) if not shards.done((t.task_id, i))]


def collect_shard(cfg, out: Path, tasks_dir: str, shard: int = 0, n_shards: int = 1) -> dict:
    """Roll out the missing episodes of one shard's tasks, each written to `<out>/shards/` as it finishes. The
    rollout settings (seed included) are the unsharded stage's, so an episode does not depend on its shard wherever
    sampling is per request (`api:` models, greedy decoding); a local model samples a batch from one seed per turn,
    so there, as after a resume, which episodes share a batch changes the samples."""
    c = cfg.collect
    shards = Shards(Path(out) / "shards")
    todo = pending_episodes(cfg, out, tasks_dir, shard, n_shards)
    if todo:
        policy, simulator = load_chat_models(cfg, cfg.models.policy, batch=c.batch_episodes)

        def save(done: list) -> None:
            for e in done:
                shards.write((e.task.task_id, e.sample_idx), [asdict(Trajectory.of_episode(e))])

        try:
            family(cfg).rollout(todo, policy, simulator, max_new_tokens=c.max_new_tokens,
                                sim_max_new_tokens=c.sim_max_new_tokens, temperature=c.temperature, seed=c.seed,
                                on_done=save, desc="collect" if n_shards == 1 else f"collect {shard + 1}/{n_shards}")
        finally:
            close_models(policy, simulator)
    return {"shard": shard, "n_shards": n_shards, "collected": len(todo)}


def finish_collection(out: Path, collected: int) -> dict:
    """Every episode under `<out>/shards/` -> trajectories.parquet and turns.parquet, and the stage summary;
    `collected` = episodes rolled out by this run (the rest were resumed from an earlier one)."""
    trajs = sorted(Shards(Path(out) / "shards").read_all(), key=lambda r: (r["task_id"], r["sample_idx"]))
    return _finish(Path(out), trajs, resumed=len(trajs) - collected)


def _finish(out: Path, trajs: list[dict], resumed: int) -> dict:
    write_rows(trajs, out / "trajectories.parquet")
    write_rows([asdict(turn) for t in trajs for turn in turns_of(t)], out / "turns.parquet")
    rewards = [t["reward"] for t in trajs]
    spread = sum(len({t["reward"] for t in trajs if t["task_id"] == tid}) > 1 for tid in {t["task_id"] for t in trajs})
    return {
        "episodes": len(trajs),
        "resumed_episodes": resumed,
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward_std": statistics.pstdev(rewards) if rewards else 0.0,
        "success_rate": statistics.fmean(t["success"] for t in trajs) if trajs else 0.0,
        # Share of episodes the agent ended itself (the rest hit the turn limit).
        "answered_rate": statistics.fmean(used_marker(t) for t in trajs) if trajs else 0.0,
        "mean_turns": statistics.fmean(t["n_turns"] for t in trajs) if trajs else 0.0,
        "tasks_with_reward_spread": spread,
    }
