"""The `evaluate-models` flow: any models (local, trained actors, `api:` models) zero-shot on held-out backend
tasks, one results table. No training; the same protocol and output layout as the pipeline's evaluate stage."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from sweet.config import PipelineConfig
from sweet.stages.evaluate import evaluate_models


@task(name="evaluate-models")
def _evaluate(cfg: PipelineConfig, agents: list[str], actors: list[str], split: str, n_tasks: int) -> str:
    out, _ = evaluate_models(cfg, agents, actors=actors, split=split, n_tasks=n_tasks)
    return str(out)


@flow(name="evaluate-models", log_prints=True)
def evaluate_models_flow(cfg: PipelineConfig = PipelineConfig(), agents: list[str] = ["api:gpt-4o"],  # noqa: B006
                         actors: list[str] = [], split: str = "test", n_tasks: int = 0) -> str:  # noqa: B006
    out = Path(_evaluate(cfg, agents, actors, split, n_tasks))
    table = (out / "results.md").read_text()
    create_markdown_artifact(markdown=f"# evaluate-models ({cfg.experiment})\n\n{table}", key="evaluate-models")
    print(f"{table}\nepisodes and dialogues: {out}")
    return table


if __name__ == "__main__":
    evaluate_models_flow()
