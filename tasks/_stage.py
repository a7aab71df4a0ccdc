"""What every stage task shares: its cache key, the cache-aware call, and registering outputs in the catalog."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger
from prefect.context import TaskRunContext
from prefect.exceptions import MissingContextError

from sweet.config import PipelineConfig
from sweet.pipeline import Stage, is_done, read_manifest, stage_dir
from sweet.store import Catalog

NOT_INPUTS = ("cfg", "parent_run_id")


def cache_key(stage: Stage):
    def key(ctx: TaskRunContext, params: dict[str, Any]) -> str:
        inputs = tuple(str(v) for k, v in params.items() if k not in NOT_INPUTS and v is not None)
        return f"sweet-{stage.name}-{stage_dir(stage, params['cfg'], inputs).name}"
    return key


def call(task_fn, stage: Stage, cfg: PipelineConfig, *inputs: str, parent_run_id: str | None = None) -> str:
    """Run the task; a stage folder that is gone (deleted by hand) refreshes the orchestrator's cache entry."""
    inputs = tuple(i for i in inputs if i is not None)  # an optional input left out (evaluate of zero_shot)
    out = stage_dir(stage, cfg, inputs)
    fresh = not is_done(out)
    path = task_fn.with_options(refresh_cache=fresh)(cfg, *inputs, parent_run_id=parent_run_id)
    registered = Catalog(cfg.root / "catalog.duckdb").register_stage(path)
    summary = read_manifest(path).get("summary", {})
    try:
        get_run_logger().info("%s %s -> %s (tables: %s) %s", stage.name, "ran" if fresh else "cache hit", path,
                              ", ".join(registered) or "-", {k: v for k, v in list(summary.items())[:6]})
    except MissingContextError:  # called outside a flow run: nothing to log to
        pass
    return path
