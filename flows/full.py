"""The `sweet-rl` flow: SWEET-RL end to end, as in the paper's Figure 2. Every argument after the config is the
folder of an upstream stage's output, so changing one stage's config reruns it and everything after it only."""

from __future__ import annotations

from prefect import flow

from flows._run import experiment_run, report
from sweet.config import PipelineConfig
from tasks.actor import train_dpo_actor
from tasks.candidates import sample_and_rank_candidates
from tasks.collect import collect_trajectories
from tasks.critic import train_critic
from tasks.evaluate import evaluate
from tasks.generate import generate_tasks
from tasks.pairs import build_preference_pairs


@flow(name="sweet-rl", log_prints=True)
def full(cfg: PipelineConfig = PipelineConfig()) -> str:
    with experiment_run(cfg, "sweet-rl") as run:
        tasks = generate_tasks(cfg, parent_run_id=run)
        trajs = collect_trajectories(cfg, tasks, parent_run_id=run)
        pairs = build_preference_pairs(cfg, trajs, parent_run_id=run)
        critic = train_critic(cfg, pairs, parent_run_id=run)
        ranked = sample_and_rank_candidates(cfg, trajs, critic, parent_run_id=run)
        actor = train_dpo_actor(cfg, ranked, parent_run_id=run)
        result = evaluate(cfg, tasks, actor, parent_run_id=run)
        return report(cfg, result, run)


if __name__ == "__main__":
    full()
