"""Episodes as MLflow traces (`sweet.monitor.record_traces`), checked through the MLflow client on a real local
store: one trace per episode, a span per agent turn, the scoring on the last, linked to the stage's run, sampled
per method and mode, and nothing in them the agent never saw (secrets, hidden tests, the reference code).

The episodes are synthetic rows written by stand-in stage functions (real episodes come from a model; the micro
end-to-end test runs those); the stage folders, manifests, MLflow runs and traces are real."""

import json
import os
from dataclasses import asdict

import pytest
from mlflow.tracking import MlflowClient

from sweet import monitor
from sweet.config import load_config
from sweet.pipeline import Stage, read_manifest, run_stage
from sweet.records import EvalResult, Trajectory
from sweet.store import dumps, write_rows

SECRET = "sk-test-FAKE-0123456789abcdef"
REFERENCE = "def scale(x):\n    factor = 3 * 7  # hidden\n    return factor * x + 11\n"
LEAKED = "return factor * x + 11"      # a reference line the simulator repeats
TESTS = ["scale(-4)", "scale(1000)"]  # hidden test calls
PROMPT = "Write a function. The signature of the function is: def scale(x):"


def _messages(k: int) -> list[dict]:
    return [{"role": "user", "content": PROMPT},
            {"role": "assistant", "content": f"What factor? (my key is {SECRET})"},
            {"role": "user", "content": f"Like this: {LEAKED}. Try scale(-4)."},
            {"role": "assistant", "content": f"I WANT TO ANSWER:\n```python\ndef scale(x):\n    return {k} * x\n```"}]


def _row(cls, task: str, k: int, **extra) -> dict:
    return asdict(cls(traj_id=f"{task}__0", task_id=task, sample_idx=0, messages=dumps(_messages(k)),
                      answer=f"def scale(x):\n    return {k} * x", reward=k / 10, success=k == 10,
                      tests_passed=k // 5, tests_total=2, n_turns=2,
                      error=f"TypeError on scale(1000) with {SECRET}" if k < 5 else None,
                      training_info=REFERENCE, metric="tests passed", scoring="strict", **extra))


def _tasks(cfg, out):
    write_rows([{"task_id": f"t{i}", "split": "test", "problem_description": PROMPT, "ground_truth": REFERENCE,
                 "test_cases": TESTS} for i in range(5)], out / "tasks.parquet")
    return {}


def _evaluated(cfg, out, tasks_dir):
    """Two systems, five tasks each, rewards 0.0 .. 1.0."""
    rows = [_row(EvalResult, f"t{i}", k, method=m, mode="multi_turn")
            for m in ("zero_shot", "sweet") for i, k in enumerate((0, 2, 5, 8, 10))]
    write_rows(rows, out / "eval_results.parquet")
    return {}


def _collected(cfg, out, tasks_dir):
    write_rows([_row(Trajectory, f"t{i}", k) for i, k in enumerate((0, 2, 5, 8, 10))], out / "trajectories.parquet")
    return {}


def _run(tmp_path, traces: str, fn=_evaluated, name="evaluate", per_group: int = 2):
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                f"tracking.traces={traces}", f"tracking.traces_per_group={per_group}"])
    tasks = run_stage(Stage("generate_tasks", _tasks, ()), cfg)
    out = run_stage(Stage(name, fn, ()), cfg, tasks)
    written = monitor.record_traces(cfg, name, out)
    client = MlflowClient(cfg.tracking_uri)
    run_id = read_manifest(out)["mlflow_run_id"]
    experiment = client.get_run(run_id).info.experiment_id
    return cfg, out, written, client, run_id, client.search_traces(locations=[experiment], run_id=run_id)


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_every_episode_is_a_trace_of_turns_linked_to_the_stage_run(tmp_path, secret_env):
    cfg, out, written, client, run_id, traces = _run(tmp_path, "all")
    assert written == len(traces) == 10
    by_name = {t.info.tags["mlflow.traceName"]: t for t in traces}
    assert set(by_name) == {f"{m}/multi_turn t{i}__0" for m in ("zero_shot", "sweet") for i in range(5)}
    t = by_name["sweet/multi_turn t4__0"]
    assert t.info.trace_metadata["mlflow.sourceRun"] == run_id
    assert t.info.tags["sweet.method"] == "sweet" and t.info.tags["sweet.success"] == "true"
    assert t.info.tags["sweet.fingerprint"] == out.split("/")[-1]
    root, *turns = t.data.spans
    assert root.parent_id is None and root.inputs == {"task": PROMPT}
    assert {k: root.attributes[k] for k in ("task_id", "method", "mode", "reward", "success")} == \
        {"task_id": "t4", "method": "sweet", "mode": "multi_turn", "reward": 1.0, "success": True}
    assert root.outputs["tests_passed"] == 2 and root.outputs["answer"].endswith("return 10 * x")
    assert [s.name for s in turns] == ["turn 1", "turn 2"] and {s.parent_id for s in turns} == {root.span_id}
    assert turns[0].inputs["agent"].startswith("What factor?") and turns[0].outputs["simulator"].startswith("Like")
    assert "scoring" not in turns[0].outputs
    assert turns[1].outputs["scoring"] == {"tests_passed": 2, "tests_total": 2, "scoring": "strict", "reward": 1.0,
                                           "success": True, "error": None}
    failed = by_name["zero_shot/multi_turn t0__0"].data.spans[-1].outputs["scoring"]
    assert failed["tests_passed"] == 0 and failed["error"].startswith("TypeError on [hidden test]")
    # A second call (a retried task) adds nothing.
    assert monitor.record_traces(cfg, "evaluate", out) == 0


def test_no_secret_hidden_test_or_reference_code_reaches_a_trace(tmp_path, secret_env):
    *_, traces = _run(tmp_path, "all")
    text = json.dumps([json.loads(t.to_json()) for t in traces])
    assert SECRET not in text and REFERENCE not in text and LEAKED not in text
    assert not any(test in text for test in TESTS)
    # ... because they were cut out where the episodes had them, not because the texts were left out.
    assert "my key is ***" in text and "[hidden reference line]" in text and "Try [hidden test]" in text
    assert "def scale(x):" in text  # the signature the agent was shown stays
    import os
    assert "MLFLOW_TRACKING_URI" not in os.environ  # the exporter's global setting was put back


def test_a_trace_mlflow_dropped_is_written_again(tmp_path, secret_env, monkeypatch, caplog):
    """MLflow's exporter only logs a warning when it cannot store a trace (on SQLite: a writer that waited too long
    for the lock). Stand-in for that: the exporter's store call fails on the first export of one episode."""
    from mlflow.tracing.export.mlflow_v3 import MlflowV3SpanExporter
    real, failed = MlflowV3SpanExporter._log_trace, []

    def flaky(self, trace, *args, **kwargs):
        if trace.info.tags.get("sweet.episode") == "sweet/multi_turn/t2__0" and not failed:
            failed.append(os.environ.get(monitor.ASYNC_TRACES))
            return None  # dropped, as MLflow does after logging its warning
        return real(self, trace, *args, **kwargs)

    monkeypatch.setattr(MlflowV3SpanExporter, "_log_trace", flaky)
    *_, written, _, _, traces = _run(tmp_path, "all")
    assert failed == ["false"]  # exported synchronously, in the writing thread
    assert written == len(traces) == 10
    assert {t.info.tags["sweet.episode"] for t in traces} >= {"sweet/multi_turn/t2__0"}
    assert "1 of 10 episode traces" in caplog.text


def test_a_trace_stored_without_all_its_spans_is_replaced(tmp_path, secret_env, monkeypatch, caplog):
    """On a SQL store the exporter writes a trace's info and its spans in separate calls; when a span write fails
    (seen under load) the info stays, and a reader loading spans skips or truncates that trace. Stand-in: the
    first write of one episode's root span is dropped after its info was stored."""
    from mlflow.tracing.export.mlflow_v3 import MlflowV3SpanExporter
    real, failed = MlflowV3SpanExporter._log_spans, []

    def flaky(self, experiment_id, spans, *args, **kwargs):
        if any(s.name == "zero_shot/multi_turn t3__0" for s in spans) and not failed:
            failed.append(len(spans))
            return None  # dropped, as MLflow does after logging its warning
        return real(self, experiment_id, spans, *args, **kwargs)

    monkeypatch.setattr(MlflowV3SpanExporter, "_log_spans", flaky)
    cfg, out, written, client, run_id, traces = _run(tmp_path, "all")
    assert failed and written == len(traces) == 10
    assert len({t.info.tags["sweet.episode"] for t in traces}) == 10
    assert all(len(t.data.spans) == 3 for t in traces)  # root + 2 turns each
    # The incomplete one was deleted, not left for the UI to list beside its replacement.
    experiment = client.get_run(run_id).info.experiment_id
    assert len(client.search_traces(locations=[experiment], run_id=run_id, include_spans=False)) == 10
    assert "incomplete" in caplog.text


def test_stages_seeded_alike_get_distinct_trace_ids(tmp_path, secret_env):
    """Every stage seeds Python's `random` with the run's seed; OpenTelemetry's default ids come from it, so two
    stages' traces got the same ids and the later took the earlier's place (the micro flow lost a collected trace).
    Two stages here, each seeded alike, write into one store."""
    import random

    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                "tracking.traces=all"])
    tasks = run_stage(Stage("generate_tasks", _tasks, ()), cfg)
    outs = {name: run_stage(Stage(name, fn, ()), cfg, tasks)
            for name, fn in (("collect_trajectories", _collected), ("evaluate", _evaluated))}
    for name, out in outs.items():
        random.seed(0)
        assert monitor.record_traces(cfg, name, out) == (5 if name == "collect_trajectories" else 10)
    client = MlflowClient(cfg.tracking_uri)
    found = []
    for out in outs.values():
        run = client.get_run(read_manifest(out)["mlflow_run_id"])
        found += client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)
    assert len(found) == len({t.info.trace_id for t in found}) == 15
    assert monitor.ISOLATED_IDS not in os.environ


def test_a_sample_spans_each_methods_rewards_and_none_writes_nothing(tmp_path, secret_env):
    *_, written, _, _, traces = _run(tmp_path / "sample", "sample")
    assert written == len(traces) == 4
    rewards = {}
    for t in traces:
        rewards.setdefault(t.info.tags["sweet.method"], set()).add(t.data.spans[0].attributes["reward"])
    assert rewards == {"zero_shot": {0.0, 1.0}, "sweet": {0.0, 1.0}}  # the worst and the best of each
    *_, written, _, _, traces = _run(tmp_path / "none", "none")
    assert written == 0 and len(traces) == 0


def test_collected_episodes_are_sampled_too(tmp_path, secret_env):
    *_, written, _, _, traces = _run(tmp_path, "sample", fn=_collected, name="collect_trajectories", per_group=3)
    assert written == len(traces) == 3
    assert {t.info.tags["sweet.method"] for t in traces} == {"collect"}
    assert sorted(t.data.spans[0].attributes["reward"] for t in traces) == [0.0, 0.5, 1.0]


def test_sample_is_spread_and_stable():
    rows = [{"traj_id": f"t{i}__0", "reward": r, "method": "m", "mode": "x"} for i, r in enumerate([.3, .1, .9, .5])]
    picked = monitor.sample(rows, 3)
    assert [r["reward"] for r in picked] == [.1, .5, .9] or [r["reward"] for r in picked] == [.1, .3, .9]
    assert picked == monitor.sample(list(reversed(rows)), 3)
    assert monitor.sample(rows, 10) == sorted(rows, key=lambda r: r["reward"])


def test_the_tracking_section_is_in_no_stage_fingerprint():
    from sweet.pipeline import config_slice
    from sweet.stages import STAGES, plan

    base = plan(load_config("micro"))
    for traces in ("none", "all"):
        assert plan(load_config("micro", [f"tracking.traces={traces}", "tracking.traces_per_group=9"])) == base
    assert not any(k.startswith("tracking") for s in STAGES for k in config_slice(load_config("micro"), s.config_keys))


def _pages(cfg, out, tasks_dir):
    row = _row(EvalResult, "t0", 7, method="sweet", mode="multi_turn")
    row |= {"metric": "pixel-ssim+edges+colour-256", "scoring": "", "tests_passed": 0, "tests_total": 0}
    write_rows([row], out / "eval_results.parquet")
    return {}


def test_a_frontend_episode_carries_its_similarity_not_tests(tmp_path, secret_env):
    *_, traces = _run(tmp_path, "all", fn=_pages)
    scoring = traces[0].data.spans[-1].outputs["scoring"]
    assert scoring["metric"] == "pixel-ssim+edges+colour-256" and scoring["reward"] == 0.7
    assert "tests_passed" not in scoring


def test_secrets_are_the_values_of_secret_looking_variables(monkeypatch):
    cfg = load_config("micro", ["api.key_env=MY_SERVICE"])
    monkeypatch.setenv("MY_SERVICE", "value-of-the-configured-key")
    monkeypatch.setenv("HF_TOKEN", "hf_0123456789")
    monkeypatch.setenv("DB_PASSWORD", "short")  # too short to be told from an ordinary word
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "disabled")
    found = set(monitor.environment_secrets(cfg))
    assert {"value-of-the-configured-key", "hf_0123456789"} <= found
    assert not {"short", "disabled"} & found
