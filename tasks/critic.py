"""Prefect task: train critic (see `sweet.stages.critic`)."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.stages import CRITIC
from tasks._stage import cache_key, call, run


@task(name="train critic", cache_key_fn=cache_key(CRITIC), persist_result=True)
def _train_critic(cfg: PipelineConfig, pairs: str, parent_run_id: str | None = None) -> str:
    return run(CRITIC, cfg, pairs, parent_run_id=parent_run_id)


def train_critic(cfg: PipelineConfig, pairs: str, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_train_critic, CRITIC, cfg, pairs, parent_run_id=parent_run_id)
