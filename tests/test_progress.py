"""Progress where the user looks: the `sweet.progress` hook the stage loops call, the MLflow metrics it feeds
(`sweet.monitor.MlflowProgress`) and the Prefect progress artifacts the task layer plugs in (`tasks._stage`).

`Recorder` is a fake reporter: it stands for whatever the orchestration layer plugs in (a Prefect progress
artifact, the stage's MLflow run) and only keeps every `Progress` it is told, so the tests can check what a real
reporter would be sent and when."""

import threading
from types import SimpleNamespace

import pytest

from sweet import progress
from sweet.colbench.backend import ANSWER_MARK, Episode, rollout
from sweet.colbench.tasks import Task


class Recorder:
    def __init__(self):
        self.seen: list[progress.Progress] = []

    def report(self, p):
        self.seen.append(p)


class Broken:
    def report(self, p):
        raise ConnectionError("the UI is down")


def test_a_bar_reports_opening_updates_and_closing_only_inside_reporting():
    rec = Recorder()
    with progress.reporting(rec):
        with progress.Bar(3, "evaluate x/multi_turn", "ep", terminal=False) as bar:
            bar.update(2)
            bar.update(0)  # nothing new: nothing sent
            bar.update()
    progress.Bar(2, "outside", "ep", terminal=False).update()  # no reporter plugged in here
    assert [(p.done, p.total, p.finished) for p in rec.seen] == [(0, 3, False), (2, 3, False), (3, 3, False),
                                                                 (3, 3, True)]
    assert {p.desc for p in rec.seen} == {"evaluate x/multi_turn"} and rec.seen[-1].percent == 100.0


def test_a_bar_keeps_its_reporters_when_updated_from_another_thread():
    rec = Recorder()
    with progress.reporting(rec):
        bar = progress.Bar(2, "collect", "ep", terminal=False)
    worker = threading.Thread(target=lambda: (bar.update(2), bar.close()))
    worker.start()
    worker.join()
    assert [p.done for p in rec.seen] == [0, 2, 2] and rec.seen[-1].finished


def test_a_failing_reporter_is_dropped_and_the_loop_goes_on(caplog):
    rec = Recorder()
    with progress.reporting(Broken(), rec):
        assert list(progress.iterate(range(3), "candidates", "turn")) == [0, 1, 2]
    assert [p.done for p in rec.seen] == [0, 1, 2, 3, 3]
    assert sum("Broken failed" in r.getMessage() for r in caplog.records) == 1  # one warning, not one per update


def test_the_trainer_callback_reports_steps_from_the_resumed_step():
    rec = Recorder()
    state = SimpleNamespace(is_world_process_zero=True, max_steps=4, global_step=1)  # resumed at step 1
    with progress.reporting(rec):
        cb = progress.trainer_callback("train_critic")
        cb.on_train_begin(None, state, None)
    for step in (2, 3, 4):
        state.global_step = step
        cb.on_step_end(None, state, None)
    cb.on_train_end(None, state, None)
    assert [(p.desc, p.unit, p.done, p.total) for p in rec.seen][:2] == [("train_critic", "step", 1, 4),
                                                                        ("train_critic", "step", 2, 4)]
    assert [p.done for p in rec.seen] == [1, 2, 3, 4, 4] and rec.seen[-1].finished


class Scripted:
    def __init__(self, reply):
        self.reply = reply

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        return [self.reply(c) for c in convs]


def test_a_rollout_reports_episodes_as_they_finish():
    task = Task("t1", "train", "Add two numbers. The signature of the function is: def add(a, b)",
                "def add(a, b):\n    return a + b", ["add(1, 2)"])
    quick = Task("t2", "train", task.problem_description + " QUICK", task.ground_truth, task.test_cases)
    answer = f"{ANSWER_MARK}\n```python\ndef add(a, b):\n    return a + b\n```"
    agent = Scripted(lambda c: answer if "QUICK" in c[0]["content"] or len(c) > 1 else "Anything else?")
    rec = Recorder()
    with progress.reporting(rec):
        rollout([Episode(task, 0, 2), Episode(quick, 0, 2), Episode(task, 1, 2)], agent, Scripted(lambda c: "No."),
                max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0, desc="evaluate sweet/multi_turn")
    assert [p.done for p in rec.seen] == [0, 1, 3, 3] and rec.seen[-1].finished
    assert {(p.desc, p.unit, p.total) for p in rec.seen} == {("evaluate sweet/multi_turn", "ep", 3)}


def _cfg(tmp_path):
    from sweet.config import load_config
    return load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db"])


def _two_loops(cfg, out):
    """A stage with two episode loops (like evaluate's two systems) and a training loop."""
    for desc, n in (("evaluate a/multi_turn", 2), ("evaluate b/multi_turn", 3)):
        with progress.Bar(n, desc, "ep", terminal=False) as bar:
            for _ in range(n):
                bar.update()
    with progress.Bar(4, "train", "step", initial=1, terminal=False) as bar:
        bar.update_to(4)
    return {}


def test_mlflow_progress_sums_a_stages_loops_into_its_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from sweet.monitor import MlflowProgress
    from sweet.pipeline import Stage, read_manifest, run_stage, stage_dir

    cfg = _cfg(tmp_path)
    stage = Stage("looping", _two_loops, ())
    with progress.reporting(MlflowProgress(cfg, stage_dir(stage, cfg, ()))):
        out = run_stage(stage, cfg)
    client = MlflowClient(cfg.tracking_uri)
    run_id = read_manifest(out)["mlflow_run_id"]

    def history(name):  # MLflow drops a value logged twice at the same step in the same millisecond: compare runs
        logged = sorted(client.get_metric_history(run_id, name), key=lambda m: (m.timestamp, m.step))
        values = [m.value for m in logged]
        return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]

    assert history("episodes_done") == [0, 1, 2, 3, 4, 5]  # the second loop adds to the first
    assert history("episodes_total") == [2, 5]
    assert history("steps_done") == [1, 4] and history("steps_total") == [4]


@pytest.fixture
def flow_with_a_stage(tmp_path):
    """A flow whose one task runs a two-loop stage through the task layer's `run` (what every stage task does)."""
    from prefect import flow, task

    from sweet.pipeline import Stage
    from tasks._stage import run

    stage = Stage("looping", _two_loops, ())

    @task
    def looping(cfg):
        return run(stage, cfg)

    @flow
    def one_stage(cfg):
        return looping(cfg)

    return one_stage, _cfg(tmp_path)


def test_prefect_progress_artifacts_follow_the_loops(flow_with_a_stage, prefect_api):
    from prefect.artifacts import Artifact

    one_stage, cfg = flow_with_a_stage
    one_stage(cfg)
    for loop, want in (("evaluate-a-multi-turn", "2/2 ep (done)"), ("evaluate-b-multi-turn", "3/3 ep (done)"),
                       ("train", "4/4 step (done)")):
        art = Artifact.get(f"progress-micro-looping-{loop}")
        assert art is not None and art.type == "progress", loop
        assert float(art.data) == 100.0 and art.description.endswith(want), (loop, art.data, art.description)
        assert art.task_run_id is not None  # shown in the task run's Artifacts tab


def test_a_stages_log_line_keeps_every_scalar_of_its_summary():
    """The Prefect log line once showed only the first 6 summary keys, hiding the candidates stage's 7th
    (first_turn_question_net); tables and long strings stay in manifest.json."""
    from tasks._stage import _scalars
    summary = {f"k{i}": i for i in range(6)} | {"first_turn_question_net": -3, "ok": True, "rate": 0.5,
                                               "rows": [1, 2], "by_task": {"a": 1}, "note": "x" * 200, "tag": "t"}
    assert _scalars(summary) == {**{f"k{i}": i for i in range(6)}, "first_turn_question_net": -3, "ok": True,
                                 "rate": 0.5, "tag": "t"}
