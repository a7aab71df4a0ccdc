"""What every stage task shares: its cache key, the cache-aware call, registering outputs in the catalog, and what
the user watches while and after a stage runs (progress artifacts here; MLflow metrics and traces: `sweet.monitor`)."""

from __future__ import annotations

import re
import time
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.context import TaskRunContext
from prefect.exceptions import MissingContextError

from sweet import monitor, progress
from sweet.config import PipelineConfig
from sweet.pipeline import Stage, is_done, read_manifest, run_stage, stage_dir
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
                              ", ".join(registered) or "-", _scalars(summary))
    except MissingContextError:  # called outside a flow run: nothing to log to
        pass
    return path


def _scalars(summary: dict) -> dict:
    """Every number and short string of a stage's summary (tables and lists stay in its manifest.json)."""
    return {k: v for k, v in summary.items()
            if isinstance(v, (int, float, bool)) or (isinstance(v, str) and len(v) < 80)}


def run(stage: Stage, cfg: PipelineConfig, *inputs: str, parent_run_id: str | None = None) -> str:
    """A task's body: `run_stage`, its loops reported to a Prefect progress artifact and the stage's MLflow run,
    then (if it ran rather than found its folder complete) its episodes recorded as MLflow traces."""
    out = stage_dir(stage, cfg, inputs)
    fresh = not is_done(out)
    with progress.reporting(PrefectProgress(f"{cfg.experiment} {stage.name}"), monitor.MlflowProgress(cfg, out)):
        path = run_stage(stage, cfg, *inputs, parent_run_id=parent_run_id)
    if fresh:
        monitor.record_traces(cfg, stage.name, path)
    return path


class PrefectProgress:
    """A `sweet.progress` reporter: each loop becomes a progress artifact of the running task (key
    `progress-<experiment>-<stage>-<loop>`, so the Artifacts page keeps the latest of each), created when the loop
    starts, updated at most every `every_s` seconds and when it ends."""

    def __init__(self, where: str, every_s: float = 1.0):
        self.where, self.every_s = where, every_s
        self._open: dict[str, list] = {}  # loop -> [artifact id, time of the last update]

    def report(self, p: progress.Progress) -> None:
        now = time.monotonic()
        text = f"{self.where}: {p.desc}: {p.done}/{p.total} {p.unit}" + (
            "" if not p.finished else " (done)" if p.done >= p.total else " (stopped)")
        art = self._open.get(p.desc)
        if art is None:
            key = _slug(f"progress {self.where} {p.desc}")
            self._open[p.desc] = [create_progress_artifact(p.percent, key=key, description=text), now]
        elif p.finished or now - art[1] >= self.every_s:
            update_progress_artifact(art[0], p.percent, description=text)
            art[1] = now
        if p.finished:
            self._open.pop(p.desc, None)


def _slug(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
