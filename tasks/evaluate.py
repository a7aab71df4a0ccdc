"""Prefect task: evaluate (see `sweet.stages.evaluate`)."""

from __future__ import annotations

from prefect import task

from sweet.config import PipelineConfig
from sweet.stages import EVALUATE
from tasks._stage import cache_key, call, run


@task(name="evaluate", cache_key_fn=cache_key(EVALUATE), persist_result=True)
def _evaluate(cfg: PipelineConfig, tasks: str, system: str | None = None, parent_run_id: str | None = None) -> str:
    return run(EVALUATE, cfg, tasks, *([system] if system else []), parent_run_id=parent_run_id)


def evaluate(cfg: PipelineConfig, tasks: str, system: str | None = None, parent_run_id: str | None = None) -> str:
    """`system`: the trained actor's folder, the critic's (best_of_n), or None (zero_shot). Returns the stage's
    output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_evaluate, EVALUATE, cfg, tasks, system, parent_run_id=parent_run_id)
