"""One flow per stage: rerun a single stage against the stored outputs of the stages before it.

The upstream folders are found from the config alone (their fingerprints), so a stage flow never recomputes
them; if one is missing it says which and stops. `force=True` moves the stage's old folder aside (nothing is
deleted) and runs it again.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from prefect import flow

from flows._run import experiment_run
from sweet.config import PipelineConfig
from sweet.pipeline import is_done
from sweet.stages import canonical, graph, plan
from tasks import actor, candidates, collect, critic, evaluate, generate, pairs

TASKS = {
    "generate_tasks": generate.generate_tasks,
    "collect_trajectories": collect.collect_trajectories,
    "build_preference_pairs": pairs.build_preference_pairs,
    "train_critic": critic.train_critic,
    "sample_and_rank_candidates": candidates.sample_and_rank_candidates,
    "train_actor": actor.train_actor,
    "evaluate": evaluate.evaluate,
}


def rerun(stage: str, cfg: PipelineConfig, force: bool = False) -> str:
    stage = canonical(stage)  # an old name (train_dpo_actor) still works
    wiring = graph(cfg.method)
    if stage not in wiring:
        raise RuntimeError(f"method {cfg.method!r} has no {stage} stage (it runs: {', '.join(wiring)})")
    dirs = plan(cfg)
    inputs = [dirs[name] for name in wiring[stage]]
    missing = [f"{name} ({dirs[name]})" for name in wiring[stage] if not is_done(Path(dirs[name]))]
    if missing:
        raise RuntimeError(f"cannot rerun {stage}: upstream outputs missing for this config: {', '.join(missing)}. "
                           "Run the full flow (sweet run) or those stages first.")
    out = Path(dirs[stage])
    if force and out.exists():
        shutil.move(out, out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}"))
    with experiment_run(cfg, stage) as run:
        return TASKS[stage](cfg, *inputs, parent_run_id=run)


@flow(name="generate-tasks")
def generate_tasks_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("generate_tasks", cfg, force)


@flow(name="collect-trajectories")
def collect_trajectories_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("collect_trajectories", cfg, force)


@flow(name="build-preference-pairs")
def build_preference_pairs_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("build_preference_pairs", cfg, force)


@flow(name="train-critic")
def train_critic_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("train_critic", cfg, force)


@flow(name="sample-and-rank-candidates")
def sample_and_rank_candidates_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("sample_and_rank_candidates", cfg, force)


@flow(name="train-actor")
def train_actor_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("train_actor", cfg, force)


@flow(name="evaluate")
def evaluate_flow(cfg: PipelineConfig = PipelineConfig(), force: bool = False) -> str:
    return rerun("evaluate", cfg, force)


FLOWS = {
    "generate_tasks": generate_tasks_flow,
    "collect_trajectories": collect_trajectories_flow,
    "build_preference_pairs": build_preference_pairs_flow,
    "train_critic": train_critic_flow,
    "sample_and_rank_candidates": sample_and_rank_candidates_flow,
    "train_actor": train_actor_flow,
    "evaluate": evaluate_flow,
}
