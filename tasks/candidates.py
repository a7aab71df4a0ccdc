"""Prefect task: sample and rank candidates (see `sweet.stages.candidates`)."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.stages import CANDIDATES
from tasks._stage import cache_key, call, run


@task(name="sample and rank candidates", cache_key_fn=cache_key(CANDIDATES), persist_result=True)
def _sample_and_rank_candidates(cfg: PipelineConfig, trajectories: str, critic: str, parent_run_id: str | None = None) -> str:
    return run(CANDIDATES, cfg, trajectories, critic, parent_run_id=parent_run_id)


def sample_and_rank_candidates(cfg: PipelineConfig, trajectories: str, critic: str, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_sample_and_rank_candidates, CANDIDATES, cfg, trajectories, critic, parent_run_id=parent_run_id)
