"""The whole `sweet-rl` flow on the `micro` profile, through Prefect, DuckDB and MLflow, then a fully cached rerun.

Real parts only: SmolLM2-135M (converted from its offline GGUF on first use), the sandbox, the bundled easy tasks.
"""

import pytest
from mlflow.tracking import MlflowClient

from sweet.config import load_config
from sweet.store import Catalog
from tests.conftest import MODELS_DIR

TABLES = ["tasks", "trajectories", "turns", "pairs", "candidates", "dpo_pairs", "eval_results"]


def _stage_folders(cfg) -> dict[str, list[tuple[str, int]]]:
    """Every finished stage folder under the experiment (<stage>/<fingerprint>) -> the names and mtimes of all its
    files."""
    return {f"{m.parent.parent.name}/{m.parent.name}":
            sorted((str(f.relative_to(m.parent)), f.stat().st_mtime_ns) for f in m.parent.rglob("*") if f.is_file())
            for m in cfg.root.glob("*/*/manifest.json")}


STAGES = sorted(["generate_tasks", "collect_trajectories", "build_preference_pairs", "train_critic",
                 "sample_and_rank_candidates", "train_actor", "evaluate", "evaluate"])  # evaluate: before, after


def _task_states(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    # "build preference pairs-a1b" -> "build_preference_pairs"; a list, not a dict: evaluate runs twice
    return sorted((r.name.rsplit("-", 1)[0].replace(" ", "_"), r.state.name) for r in runs)


@pytest.mark.slow
def test_micro_flow_end_to_end_then_all_cache_hits(tmp_path, openai_server, prefect_api):
    # A third system in the results table: an "API model" served by the OpenAI-compatible stub (standing in for
    # GPT-4o or a vLLM server) that always answers with a fixed function.
    openai_server.responder = lambda req: "I WANT TO ANSWER:\ndef f(x):\n    return x"
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"models.cache_dir={MODELS_DIR}", "models.device=cpu",
                                f'evaluate.agents=["api:stub@{openai_server.base_url}"]'])
    from flows.full import full

    state = full(cfg=cfg, return_state=True)
    assert state.is_completed(), state
    report = state.result()
    assert "| zero_shot |" in report and "| sweet |" in report and "| stub |" in report and "% tests passed" in report

    cat = Catalog(cfg.root / "catalog.duckdb")
    counts = {t: cat.query(f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in TABLES}
    assert all(n > 0 for n in counts.values()), counts
    assert counts["trajectories"] == cfg.tasks.n_train * cfg.collect.k
    assert counts["eval_results"] == 3 * cfg.tasks.n_test
    assert {r["method"] for r in cat.query("SELECT DISTINCT method FROM eval_results")} == {"zero_shot", "sweet", "stub"}

    client = MlflowClient(cfg.tracking_uri)
    exp = client.get_experiment_by_name(cfg.experiment)
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.data.tags.get("prefect.flow_run_id") == str(state.state_details.flow_run_id)]
    assert len(parent) == 1
    stages = {r.data.tags["sweet.stage"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id}
    assert len(stages) == 7
    for name in ("train_critic", "train_actor"):
        history = client.get_metric_history(stages[name].info.run_id, "loss")
        assert len(history) >= 1, f"{name} logged no per-step loss"
    assert {"zero_shot/multi_turn/tests_passed", "sweet/multi_turn/tests_passed", "stub/multi_turn/failed"} <= \
        set(client.get_run(parent[0].info.run_id).data.metrics)
    assert len([r for r in runs if r.data.tags.get("sweet.stage") == "evaluate"]) == 2  # before (zero_shot), after
    assert stages["collect_trajectories"].data.params["collect.k"] == str(cfg.collect.k)
    artifacts = {a.path for a in client.list_artifacts(stages["evaluate"].info.run_id)}
    assert {"results.md", "dialogues.md", "tests_passed.png"} <= artifacts
    # Episodes as traces (the default sample) linked to their stage's run; progress as the stage runs' metrics.
    for name, n in (("collect_trajectories", cfg.tracking.traces_per_group), ("evaluate", None)):
        traces = client.search_traces(locations=[exp.experiment_id], run_id=stages[name].info.run_id)
        assert traces and (n is None or len(traces) == n), (name, len(traces))
        assert all(t.info.trace_metadata["mlflow.sourceRun"] == stages[name].info.run_id for t in traces)
    assert stages["collect_trajectories"].data.metrics["episodes_done"] == counts["trajectories"]
    assert stages["train_actor"].data.metrics["steps_done"] >= 1

    # The rerun is all cache hits: every task run is Cached, no stage folder is added or written to.
    folders = _stage_folders(cfg)
    assert sorted(f.split("/")[0] for f in folders) == STAGES, sorted(folders)
    again = full(cfg=cfg, return_state=True)
    assert again.is_completed() and again.result() == report
    states = _task_states(again.state_details.flow_run_id)
    assert states == [(name, "Cached") for name in STAGES], states
    assert _stage_folders(cfg) == folders

    # Changing one stage's parameter reruns that stage (here the last one) and no other.
    changed = cfg.model_copy(update={"evaluate": cfg.evaluate.model_copy(update={"max_new_tokens": 40})})
    third = full(cfg=changed, return_state=True)
    assert third.is_completed()
    states = _task_states(third.state_details.flow_run_id)
    assert states == sorted((n, "Completed" if n == "evaluate" else "Cached") for n in STAGES), states
    # ... into folders of their own (new fingerprints; both evaluations use the changed setting); the first run's
    # folders, its evaluate folders included, are untouched.
    now = _stage_folders(changed)
    added = sorted(set(now) - set(folders))
    assert [f.split("/")[0] for f in added] == ["evaluate", "evaluate"], sorted(now)
    assert {k: v for k, v in now.items() if k in folders} == folders
