"""MLflow tracking: one parent run per flow run, one nested run per stage, per-step training losses.

Runs are created and written through `MlflowClient` with explicit run ids rather than MLflow's fluent "active
run", because Prefect may run tasks on other threads and a resumed stage must write into its old run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Iterator

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.entities import Metric, Param  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

RUN_ID_FILE = "mlflow_run_id"
_SECRET = re.compile(r"(api[_-]?key|token|secret|password)", re.I)


def client(cfg) -> MlflowClient:
    return MlflowClient(tracking_uri=cfg.tracking_uri)


def experiment_id(cfg) -> str:
    c = client(cfg)
    exp = c.get_experiment_by_name(cfg.experiment)
    return exp.experiment_id if exp else c.create_experiment(cfg.experiment)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested config to MLflow params; anything that looks like a secret is never logged."""
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif _SECRET.search(key):
            out[key] = "***"
        else:
            out[key] = str(v)[:500]
    return out


def start_parent_run(cfg, flow_run_id: str | None, run_name: str) -> str:
    tags = {"sweet.profile": cfg.profile, "sweet.kind": "flow"}
    if flow_run_id:
        tags["prefect.flow_run_id"] = flow_run_id
    run = client(cfg).create_run(experiment_id(cfg), run_name=run_name, tags=tags)
    log_params(cfg, run.info.run_id, cfg.model_dump())
    return run.info.run_id


def end_run(cfg, run_id: str, status: str = "FINISHED") -> None:
    client(cfg).set_terminated(run_id, status=status)


@contextlib.contextmanager
def stage_run(cfg, stage: str, out: Path, params: dict[str, Any], parent_run_id: str | None) -> Iterator[str]:
    """Open the stage's run; a stage folder that already has a run id (an interrupted stage) continues that run."""
    c = client(cfg)
    id_file = Path(out) / RUN_ID_FILE
    run_id = None
    if id_file.exists():
        try:
            run_id = c.get_run(id_file.read_text().strip()).info.run_id
            c.update_run(run_id, status="RUNNING")
        except Exception:  # the tracking store was wiped: start a fresh run
            run_id = None
    if run_id is None:
        tags = {"sweet.stage": stage, "sweet.fingerprint": Path(out).name, "sweet.kind": "stage"}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run_id = c.create_run(experiment_id(cfg), run_name=stage, tags=tags).info.run_id
        log_params(cfg, run_id, params)
        id_file.write_text(run_id)
    try:
        yield run_id
    except BaseException:
        c.set_terminated(run_id, status="FAILED")
        raise
    c.set_terminated(run_id, status="FINISHED")


def log_metrics(cfg, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
    now = int(time.time() * 1000)
    batch = [Metric(_metric_name(k), float(v), now, step or 0) for k, v in metrics.items()
             if isinstance(v, (int, float)) and math.isfinite(float(v))]
    if batch:
        client(cfg).log_batch(run_id, metrics=batch)


def log_params(cfg, run_id: str, params: dict[str, Any]) -> None:
    client(cfg).log_batch(run_id, params=[Param(k, v) for k, v in flatten(params).items()])


def _metric_name(k: str) -> str:
    return re.sub(r"[^0-9A-Za-z_\-./ ]", "_", k)


def log_text(cfg, run_id: str, text: str, artifact_file: str) -> None:
    client(cfg).log_text(run_id, text, artifact_file)


def log_dict(cfg, run_id: str, obj: Any, artifact_file: str) -> None:
    client(cfg).log_text(run_id, json.dumps(obj, indent=2, default=str), artifact_file)


def log_figure(cfg, run_id: str, fig, artifact_file: str) -> None:
    import matplotlib.pyplot as plt

    try:
        client(cfg).log_figure(run_id, fig, artifact_file)
    finally:
        plt.close(fig)  # pyplot keeps every figure alive until closed: a long-lived process would leak them


def log_file(cfg, run_id: str, path: Path | str, artifact_path: str | None = None) -> None:
    client(cfg).log_artifact(run_id, str(path), artifact_path)


def find_runs(cfg, filter_string: str = "") -> list:
    exp = client(cfg).get_experiment_by_name(cfg.experiment)
    if exp is None:
        return []
    return client(cfg).search_runs([exp.experiment_id], filter_string=filter_string, max_results=1000)


def trainer_callback(cfg, run_id: str):
    """A transformers `TrainerCallback` that logs every logged loss to `run_id` at the trainer's global step."""
    from transformers import TrainerCallback

    class MlflowStepLogger(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:  # under `accelerate launch` every rank logs the same losses
                log_metrics(cfg, run_id, {k: v for k, v in logs.items() if isinstance(v, (int, float))},
                            step=state.global_step)

    return MlflowStepLogger()
