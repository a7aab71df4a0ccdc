"""`sweet evaluate` and the `evaluate-models` Prefect flow with API systems on the stub server (standing in for
OpenAI or vLLM); the sandbox, MLflow and Prefect are real."""

import json

from sweet.cli import main
from sweet.config import load_config

ANSWER = "I WANT TO ANSWER:\ndef add(a, b):\n    return a + b + 1"


def _tasks(tmp_path):
    f = tmp_path / "tasks.jsonl"
    row = {"split": "test", "problem_description": "Add.\nThe signature of the function is: def add(a, b)",
           "ground_truth": "def add(a, b):\n    return a + b + 1", "test_cases": [f"add({i}, 1)" for i in range(10)]}
    f.write_text("".join(json.dumps({**row, "task_id": f"t{i}"}) + "\n" for i in range(2)))
    return f


def test_cli_evaluate_prints_one_table(tmp_path, openai_server, capsys):
    openai_server.responder = lambda req: ANSWER
    sets = [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db", f"tasks.source={_tasks(tmp_path)}",
            f"api.base_url={openai_server.base_url}", "models.simulator=api:sim"]
    argv = ["evaluate", "--profile", "micro", "--agent", "api:right", "--agent", "api:right", "--mode", "single_turn"]
    assert main(argv + [x for s in sets for x in ("--set", s)]) == 0
    out = capsys.readouterr().out
    assert "| right | single_turn | strict | 100.0 ± 0.0 |" in out and "| right_ | single_turn |" in out
    assert main(["evaluate", "--set", f"artifacts_dir={tmp_path}"]) == 2
    assert "at least one --agent" in capsys.readouterr().err
    assert main(["evaluate", "--agent", "x", "--actor", str(tmp_path / "nope")] +
                [x for s in sets for x in ("--set", s)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_evaluate_models_flow(tmp_path, openai_server, prefect_api):
    from flows.evaluate_models import evaluate_models_flow

    openai_server.responder = lambda req: ANSWER
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                f"tasks.source={_tasks(tmp_path)}", f"api.base_url={openai_server.base_url}",
                                "models.simulator=api:sim"])
    table = evaluate_models_flow(cfg=cfg, agents=["api:right"], n_tasks=1)
    assert "| right | multi_turn | strict | 100.0" in table and "| 1 | 0 |" in table


def test_diagnostic_episodes_add_samples_on_the_first_tasks_outside_the_table(tmp_path, openai_server):
    """The critic's best-of-N pool: samples n_samples.. diagnostic_samples-1 on the first diagnostic_tasks tasks, in
    their own shards and in the table's model load, so the table (and its paired comparison) still has n_samples
    episodes on every task."""
    from sweet.colbench.registry import family
    from sweet.stages.collect import load_chat_models
    from sweet.stages.evaluate import _read, diagnostic_episodes, run_systems

    openai_server.responder = lambda req: ANSWER
    sets = [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db", f"tasks.source={_tasks(tmp_path)}",
            f"api.base_url={openai_server.base_url}", "models.simulator=api:sim", 'evaluate.modes=["single_turn"]']
    cfg = load_config("micro", sets + ["evaluate.diagnostic_samples=3", "evaluate.diagnostic_tasks=1"])
    tasks = [t for t in family(cfg).load_pool(cfg) if t.split == "test"]
    out, loads = tmp_path / "eval", []
    out.mkdir()

    def system():  # the real API client, counted: both passes must share one load (one server start, locally)
        loads.append(1)
        return load_chat_models(cfg, "api:right")

    table = run_systems(cfg, out, tasks, {"right": system}, diagnose=("right", "single_turn"))
    assert sorted((r["task_id"], r["sample_idx"]) for r in table) == [("t0", 0), ("t1", 0)]
    assert len(loads) == 1
    extra = _read(out / "shards" / "right/single_turn-diagnostic")
    assert sorted((r["task_id"], r["sample_idx"]) for r in extra) == [("t0", 1), ("t0", 2)]
    assert all(r["reward"] == 1.0 and r["method"] == "right" for r in extra)
    assert len(run_systems(cfg, out, tasks, {"right": system}, diagnose=("right", "single_turn"))) == 2
    assert len(loads) == 1  # everything was done: nothing loads again
    assert diagnostic_episodes(load_config("micro", sets), out, tasks, "right", system, "single_turn") is None
