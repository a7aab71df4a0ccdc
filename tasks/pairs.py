"""Prefect task: build preference pairs (see `sweet.stages.pairs`)."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.stages import PAIRS
from tasks._stage import cache_key, call, run


@task(name="build preference pairs", cache_key_fn=cache_key(PAIRS), persist_result=True)
def _build_preference_pairs(cfg: PipelineConfig, trajectories: str, parent_run_id: str | None = None) -> str:
    return run(PAIRS, cfg, trajectories, parent_run_id=parent_run_id)


def build_preference_pairs(cfg: PipelineConfig, trajectories: str, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_build_preference_pairs, PAIRS, cfg, trajectories, parent_run_id=parent_run_id)
