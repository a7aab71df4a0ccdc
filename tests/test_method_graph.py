"""flows/full.py runs exactly the method graph of `sweet.graph` for every method.

The flow's stage tasks are replaced by recorders (standing in for the Prefect tasks: each returns a fake folder
named after its stage), so the test sees which stages the flow calls, with which inputs and for which method."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

import flows.full as full_flow
from sweet.config import METHODS, load_config
from sweet import graph as G


def _record(monkeypatch):
    calls = []

    def recorder(stage):
        def call(cfg, *inputs, parent_run_id=None):
            calls.append((cfg.method, stage, tuple(i.split(":")[0] for i in inputs if i is not None)))
            return f"{stage}:{cfg.method}"
        return call

    for stage in G.STAGE_NAMES:
        monkeypatch.setattr(full_flow, stage, recorder(stage))
    monkeypatch.setattr(full_flow, "experiment_run", lambda cfg, name: contextlib.nullcontext("run-id"))
    monkeypatch.setattr(full_flow, "report", lambda cfg, dirs, run: "table")
    return calls


@pytest.mark.parametrize("method", METHODS)
def test_full_flow_runs_the_declared_graph(method, monkeypatch):
    calls = _record(monkeypatch)
    cfg = load_config("micro", [f"method={method}"])
    assert full_flow.full.fn(cfg) == "table"
    want = [(method, stage, inputs) for stage, inputs in G.graph(method).items() if stage != "evaluate"]
    want.append((G.BEFORE, "evaluate", ("generate_tasks",)))  # the initial policy's row
    want.append((method, "evaluate", G.graph(method)["evaluate"]))
    assert sorted(calls) == sorted(want)
    assert [c[1] for c in calls if c[1] != "evaluate"] == [s for s in G.graph(method) if s != "evaluate"]  # in order


def test_every_method_has_a_graph_over_known_stages_in_order():
    for method in METHODS:
        stages = list(G.graph(method))
        assert stages == [s for s in G.STAGE_NAMES if s in stages], method
        for stage, inputs in G.graph(method).items():
            assert all(i in stages[:stages.index(stage)] for i in inputs), (method, stage)


def test_old_stage_name_is_an_alias_and_unknown_names_are_refused():
    assert G.canonical("train_dpo_actor") == "train_actor"
    with pytest.raises(ValueError, match="choose from"):
        G.canonical("train_actr")
    with pytest.raises(ValueError, match="unknown method"):
        G.graph("sweeet")


def test_stage_flows_tasks_and_deployments_cover_every_stage_once():
    import yaml

    from flows.stages import FLOWS, TASKS
    from sweet.stages import STAGES

    assert list(FLOWS) == list(TASKS) == [s.name for s in STAGES] == list(G.STAGE_NAMES)
    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "prefect.yaml").read_text())
    stage_entries = sorted(d["entrypoint"] for d in spec["deployments"] if d["name"] == "stage")
    assert stage_entries == sorted(f"flows/stages.py:{f.fn.__name__}" for f in FLOWS.values())
    assert {d["entrypoint"] for d in spec["deployments"] if d["name"] == "full"} == {"flows/full.py:full"}
