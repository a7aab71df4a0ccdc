"""The `sweet-rl` flow: SWEET-RL end to end, as in the paper's Figure 2, or one of its baselines (`cfg.method`).
Every argument after the config is the folder of an upstream stage's output, so changing one stage's config reruns
it and everything after it only; methods share the stages they have in common (same tasks, same trajectories)."""

from __future__ import annotations

from prefect import flow

from flows._run import experiment_run, report
from sweet.config import PipelineConfig, with_method
from tasks.actor import train_actor
from tasks.candidates import sample_and_rank_candidates
from tasks.collect import collect_trajectories
from tasks.critic import train_critic
from tasks.evaluate import evaluate
from tasks.generate import generate_tasks
from tasks.pairs import build_preference_pairs


@flow(name="sweet-rl", log_prints=True)
def full(cfg: PipelineConfig = PipelineConfig()) -> str:
    m = cfg.method
    with experiment_run(cfg, "sweet-rl") as run:
        tasks = generate_tasks(cfg, parent_run_id=run)
        system = None  # zero_shot: the initial policy
        if m != "zero_shot":
            trajs = collect_trajectories(cfg, tasks, parent_run_id=run)
            if m == "rft":  # SFT on the successful trajectories
                system = train_actor(cfg, trajs, parent_run_id=run)
            else:
                pairs = build_preference_pairs(cfg, trajs, parent_run_id=run)
                if m == "mt_dpo":  # trajectory-level DPO on the pairs, no critic
                    system = train_actor(cfg, pairs, parent_run_id=run)
                else:
                    critic = train_critic(cfg, pairs, parent_run_id=run)
                    if m == "best_of_n":  # no training: the critic picks among N actions per turn
                        system = critic
                    else:  # sweet and its critic ablations
                        ranked = sample_and_rank_candidates(cfg, trajs, critic, parent_run_id=run)
                        system = train_actor(cfg, ranked, parent_run_id=run)
        before = evaluate(with_method(cfg, "zero_shot"), tasks, parent_run_id=run)
        after = evaluate(cfg, tasks, system, parent_run_id=run)
        return report(cfg, [before, after], run)


if __name__ == "__main__":
    full()
