"""Prefect task: train the actor (see `sweet.stages.actor`): SWEET-RL's turn-level DPO on ranked candidates, or
a baseline's (RFT on collected trajectories, multi-turn DPO on preference pairs) — `data` is that stage's folder."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.stages import ACTOR
from tasks._stage import cache_key, call, run


@task(name="train actor", cache_key_fn=cache_key(ACTOR), persist_result=True)
def _train_actor(cfg: PipelineConfig, data: str, parent_run_id: str | None = None) -> str:
    return run(ACTOR, cfg, data, parent_run_id=parent_run_id)


def train_actor(cfg: PipelineConfig, data: str, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_train_actor, ACTOR, cfg, data, parent_run_id=parent_run_id)
