"""Prefect task: generate tasks (see `sweet.stages.generate`)."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.stages import GENERATE
from tasks._stage import cache_key, call, run


@task(name="generate tasks", cache_key_fn=cache_key(GENERATE), persist_result=True)
def _generate_tasks(cfg: PipelineConfig, parent_run_id: str | None = None) -> str:
    return run(GENERATE, cfg, parent_run_id=parent_run_id)


def generate_tasks(cfg: PipelineConfig, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_generate_tasks, GENERATE, cfg, parent_run_id=parent_run_id)
