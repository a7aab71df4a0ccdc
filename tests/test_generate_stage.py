"""The generate-tasks stage with a task generator behind an OpenAI-compatible endpoint (the stub server stands in
for the LLM; canned generations come from the task-generation tests). Validation runs in the real sandbox."""

import itertools
import json

from sweet.colbench.sources import load_tasks
from sweet.config import load_config
from sweet.pipeline import read_manifest, run_stage
from sweet.stages import GENERATE
from sweet.store import read_rows
from tests.test_taskgen import FENCED, GOOD, RAISES


def test_generate_stage_writes_validated_unique_tasks(tmp_path, openai_server):
    outputs = itertools.cycle([GOOD, "no tags at all", RAISES, FENCED, GOOD])
    openai_server.responder = lambda req: next(outputs)
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                f"tasks.generator=api:writer@{openai_server.base_url}", "tasks.n_train=1",
                                "tasks.n_test=1"])
    out = run_stage(GENERATE, cfg)
    tasks = read_rows(f"{out}/tasks.parquet")
    assert sorted(t["split"] for t in tasks) == ["test", "train"]
    assert {t["task_id"] for t in tasks} == {t.task_id for t in load_tasks(f"{out}/generated_tasks.jsonl")}
    assert all(len(t["test_cases"]) == 10 and t["task_id"].startswith("gen-") for t in tasks)
    stats = json.loads((tmp_path / out / "generation_stats.json").read_text())
    assert stats["accepted"] == 2 and stats["valid"] >= 2 and stats["generated"] >= 4
    assert read_manifest(out)["summary"]["generation/accepted"] == 2
    assert "<reference>" in openai_server.requests[0]["json"]["messages"][-1]["content"]


def test_generation_that_keeps_too_few_tasks_says_so(tmp_path, openai_server):
    openai_server.responder = lambda req: "I cannot help with that."
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                f"tasks.generator=api:writer@{openai_server.base_url}"])
    try:
        run_stage(GENERATE, cfg)
    except ValueError as e:
        assert "kept 0 of the 5 tasks" in str(e)
    else:
        raise AssertionError("expected a clear error")


def test_collect_imports_official_offline_trajectories(tmp_path):
    """`collect.offline_path`: the released trajectory format feeds the pipeline instead of a rollout."""
    from sweet.stages import COLLECT, PAIRS

    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                "collect.offline_path=tests/data/official/offline.jsonl"])
    tasks_dir = run_stage(GENERATE, cfg)
    out = run_stage(COLLECT, cfg, tasks_dir)
    trajs = read_rows(f"{out}/trajectories.parquet")
    assert len(trajs) == 6 and len({t["task_id"] for t in trajs}) == 2
    assert all(t["reward"] is not None and 0.0 <= t["reward"] <= 1.0 for t in trajs)  # unscored rows were scored
    assert all(json.loads(t["messages"])[0]["content"].startswith("You are helping a user") for t in trajs)
    assert read_manifest(out)["summary"]["episodes"] == 6
    pairs = read_rows(f"{run_stage(PAIRS, cfg, out)}/pairs.parquet")
    assert pairs and all(p["chosen_reward"] > p["rejected_reward"] for p in pairs)
