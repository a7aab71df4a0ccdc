"""The flow-level MLflow parent run and the end-of-run report."""

from __future__ import annotations

import contextlib
from typing import Iterator

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from sweet import tracking
from sweet.config import PipelineConfig
from sweet.pipeline import read_manifest
from sweet.store import Catalog


@contextlib.contextmanager
def experiment_run(cfg: PipelineConfig, name: str) -> Iterator[str]:
    """One MLflow parent run per flow run, tagged with the Prefect flow-run id; stage runs nest under it."""
    run_id = tracking.start_parent_run(cfg, flow_run.get_id(), run_name=f"{name}:{flow_run.get_name() or 'local'}")
    try:
        yield run_id
    except BaseException:
        tracking.end_run(cfg, run_id, "FAILED")
        raise
    tracking.end_run(cfg, run_id)


def report(cfg: PipelineConfig, eval_dirs: list[str], run_id: str) -> str:
    """One table for every method evaluated on these tasks under this protocol (this run's and earlier runs'),
    written to artifacts/<experiment>/results.md, the catalog's eval_results view, the parent MLflow run and a
    Prefect artifact."""
    from sweet.stages import EVALUATE
    from sweet.stages.report import compare, plot_name, plot_summaries, results_table

    tasks_dir = read_manifest(eval_dirs[-1])["inputs"][0]
    files, summaries = compare(cfg, tasks_dir, EVALUATE.name, EVALUATE.config_keys)
    table = results_table(summaries)
    (cfg.root / "results.md").write_text(table)
    Catalog(cfg.root / "catalog.duckdb").register("eval_results", files)
    tracking.log_metrics(cfg, run_id, {f"{k}/{m}": v for k, s in summaries.items() for m, v in s.items()
                                       if isinstance(v, (int, float))})
    tracking.log_text(cfg, run_id, table, "results.md")
    tracking.log_figure(cfg, run_id, plot_summaries(summaries), plot_name(summaries))
    where = (
        f"\nOutputs:  {cfg.root}/<stage>/<fingerprint>/   (this table: {cfg.root / 'results.md'})\n"
        f"Catalog:  duckdb {cfg.root / 'catalog.duckdb'}  (e.g. SELECT method, mode, avg(reward) FROM eval_results GROUP BY ALL)\n"
        f"MLflow:   mlflow ui --backend-store-uri {cfg.tracking_uri} --host 127.0.0.1 --port 5000\n"
        f"Prefect:  prefect server start --host 127.0.0.1   (or: make serve)\n"
    )
    text = f"\nHeld-out {cfg.task_family} tasks ({cfg.experiment}, method {cfg.method}):\n\n{table}{where}"
    create_markdown_artifact(markdown=f"# sweet-rl results ({cfg.experiment})\n\n{table}", key=f"results-{_slug(cfg.experiment)}")
    get_run_logger().info("results: %s (also the Prefect artifact results-%s)", cfg.root / "results.md",
                          _slug(cfg.experiment))
    return text


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower())
