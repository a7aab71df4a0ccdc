"""Fingerprints chain: a stage's folder changes with its own config, its inputs and its code, nothing else."""

import json

import pytest

from sweet.config import load_config
from sweet.pipeline import Stage, fingerprint, is_done, run_stage
from sweet.stages import STAGES, plan
from sweet.graph import SWEET as INPUTS


def test_changing_one_stage_changes_it_and_later_stages_only():
    base = plan(load_config("micro"))
    changed = plan(load_config("micro", ["critic.beta=0.5"]))
    order = [s.name for s in STAGES]
    same = {name for name in order if base[name] == changed[name]}
    assert same == {"generate_tasks", "collect_trajectories", "build_preference_pairs"}
    changed = plan(load_config("micro", ["evaluate.max_turns=3"]))
    assert {n for n in order if base[n] != changed[n]} == {"evaluate"}
    changed = plan(load_config("micro", ["collect.k=7"]))
    assert {n for n in order if base[n] == changed[n]} == {"generate_tasks"}


def test_fields_outside_the_slice_do_not_matter():
    a = plan(load_config("micro"))
    b = plan(load_config("micro", ["models.device=cpu", "mlflow_uri=sqlite:///x.db"]))
    assert a == b


def test_inputs_graph_matches_stage_order():
    from sweet.config import METHODS
    from sweet.stages import graph

    seen = set()
    for s in STAGES:
        assert set(INPUTS[s.name]) <= seen
        seen.add(s.name)
    for m in METHODS:
        order = list(graph(m))
        assert order[0] == "generate_tasks" and order[-1] == "evaluate"
        assert order == [s.name for s in STAGES if s.name in order]
        assert all(set(ins) <= set(order[:i]) for i, ins in enumerate(graph(m).values()))


def test_methods_share_the_stages_they_have_in_common():
    from sweet.config import with_method

    cfg = load_config("micro")
    sweet, rft = plan(cfg), plan(with_method(cfg, "rft"))
    ablation, bon = plan(with_method(cfg, "no_length_norm")), plan(with_method(cfg, "best_of_n"))
    assert set(rft) == {"generate_tasks", "collect_trajectories", "train_actor", "evaluate"}
    assert rft["collect_trajectories"] == sweet["collect_trajectories"]
    assert rft["train_actor"] != sweet["train_actor"]
    assert ablation["build_preference_pairs"] == sweet["build_preference_pairs"]
    assert ablation["train_critic"] != sweet["train_critic"]  # the critic switch is in its slice
    assert bon["train_critic"] == sweet["train_critic"] and "sample_and_rank_candidates" not in bon
    assert plan(with_method(cfg, "zero_shot"))["evaluate"] == plan(with_method(with_method(cfg, "rft"), "zero_shot"))["evaluate"]
    assert with_method(cfg, "no_training_info").critic.use_training_info is False


def _double(cfg, out, src):
    rows = json.loads((__import__("pathlib").Path(src) / "data.json").read_text())
    (out / "data.json").write_text(json.dumps([2 * r for r in rows]))
    return {"n": len(rows)}


def _source(cfg, out):
    (out / "data.json").write_text(json.dumps(list(range(cfg.collect.k))))
    return {"n": cfg.collect.k}


def test_run_stage_caches_and_refuses_incomplete_inputs(tmp_path, monkeypatch):
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db"])
    src = Stage("src", _source, ("collect",))
    dbl = Stage("double", _double, ())
    a = run_stage(src, cfg)
    assert is_done(a)
    b = run_stage(dbl, cfg, a)
    assert json.loads((tmp_path / "micro" / "double" / b.split("/")[-1] / "data.json").read_text()) == [0, 2, 4, 6]
    mtime = (tmp_path / "micro" / "double" / b.split("/")[-1] / "manifest.json").stat().st_mtime_ns
    assert run_stage(dbl, cfg, a) == b  # cache hit: nothing rewritten
    assert (tmp_path / "micro" / "double" / b.split("/")[-1] / "manifest.json").stat().st_mtime_ns == mtime
    (tmp_path / "micro" / "src" / a.split("/")[-1] / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="incomplete"):
        run_stage(dbl, cfg, a)
    assert fingerprint(dbl, cfg, (a,)) != fingerprint(dbl, cfg, (a + "x",))


def test_interrupted_stage_continues_its_mlflow_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from sweet import tracking

    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db"])
    attempts = []

    def flaky(cfg, out):
        run_id = (out / tracking.RUN_ID_FILE).read_text()
        attempts.append(run_id)
        tracking.log_metrics(cfg, run_id, {"loss": float(len(attempts))}, step=len(attempts))
        if len(attempts) == 1:
            raise RuntimeError("killed")
        return {"n": 1}

    stage = Stage("flaky", flaky, ())
    with pytest.raises(RuntimeError):
        run_stage(stage, cfg)
    client = MlflowClient(cfg.tracking_uri)
    assert client.get_run(attempts[0]).info.status == "FAILED"
    run_stage(stage, cfg)
    assert attempts[0] == attempts[1]
    run = client.get_run(attempts[0])
    assert run.info.status == "FINISHED" and run.data.metrics["n"] == 1
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [1.0, 2.0]


def test_llamacpp_slot_settings_count_only_when_llamacpp_samples():
    from sweet.config import load_config
    from sweet.stages import plan

    base, slots = load_config("micro"), load_config("micro", ["engine.llamacpp_parallel=4"])
    assert plan(base)["collect_trajectories"] == plan(slots)["collect_trajectories"]
    llama = load_config("micro", ["engine.backend=llamacpp"])
    llama_slots = load_config("micro", ["engine.backend=llamacpp", "engine.llamacpp_parallel=4"])
    assert plan(llama)["collect_trajectories"] != plan(llama_slots)["collect_trajectories"]
    assert plan(llama)["generate_tasks"] == plan(llama_slots)["generate_tasks"]  # no rollout there
