"""Prefect task: collect trajectories (see `sweet.stages.collect`)."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.pipeline import run_stage
from sweet.stages import COLLECT
from tasks._stage import cache_key, call


@task(name="collect trajectories", cache_key_fn=cache_key(COLLECT), persist_result=True)
def _collect_trajectories(cfg: PipelineConfig, tasks: str, parent_run_id: str | None = None) -> str:
    return run_stage(COLLECT, cfg, tasks, parent_run_id=parent_run_id)


def collect_trajectories(cfg: PipelineConfig, tasks: str, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_collect_trajectories, COLLECT, cfg, tasks, parent_run_id=parent_run_id)
