"""Rollout fan-out: `collect.shards=2` runs the collect stage's shards as Prefect tasks on a local Dask cluster of two
worker processes (`prefect_dask.DaskTaskRunner`). Same trajectories as the single-process stage, episodes produced
in two worker processes, a cached rerun starts no cluster, a wrong scheduler address fails at once naming the
field. Policy and simulator are `api:` models on the stub server (no language model is loaded); Prefect, Dask, the
sandbox and the store are real."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

pytest.importorskip("prefect_dask")

from prefect import flow  # noqa: E402

import tasks.collect as collect_task  # noqa: E402
from sweet.config import load_config  # noqa: E402
from sweet.pipeline import config_slice, read_manifest  # noqa: E402
from sweet.stages import COLLECT, plan  # noqa: E402
from sweet.store import read_rows  # noqa: E402
from tasks.generate import generate_tasks  # noqa: E402

SIGNATURE = re.compile(r"The signature of the function is: def (\w+)\(([^)]*)\)")


def responder(req: dict) -> str:
    """The policy ('policy') asks once on tasks whose function takes one argument, else (and after a reply)
    answers `return <first argument>`, which passes some tests of some tasks; the simulator ('sim') replies."""
    if req["model"] == "sim":
        return "Yes, just that."
    msgs = req["messages"]
    name, args = SIGNATURE.search(msgs[0]["content"]).groups()
    args = [a.strip() for a in args.split(",") if a.strip()]
    if len(args) == 1 and len(msgs) == 1:
        return "Should it handle negative numbers?"
    return f"I WANT TO ANSWER:\ndef {name}({', '.join(args)}):\n    return {args[0]}"


@flow(name="collect-only")
def collect_only(cfg) -> str:
    return collect_task.collect_trajectories(cfg, generate_tasks(cfg))


def _cfg(tmp_path, run: str, server, *sets: str):
    return load_config("micro", [
        f"artifacts_dir={tmp_path / run}", f"mlflow_uri=sqlite:///{tmp_path}/mlflow.db",
        f"api.base_url={server.base_url}", "models.policy=api:policy", "models.simulator=api:sim",
        "tasks.n_train=4", "collect.k=3", "collect.max_turns=2", *sets])


def _outputs(stage_dir: str) -> tuple[list[dict], list[dict], dict]:
    d = Path(stage_dir)
    return read_rows(d / "trajectories.parquet"), read_rows(d / "turns.parquet"), read_manifest(d)["summary"]


def _no_cluster(*args):
    raise AssertionError("a Dask cluster was started")


def test_shards_and_scheduler_address_do_not_enter_the_fingerprint():
    base = load_config("micro")
    sharded = load_config("micro", ["collect.shards=16", "collect.dask_address=tcp://10.0.0.5:8786"])
    assert plan(base) == plan(sharded)
    keys = set(config_slice(sharded, COLLECT.config_keys)["collect"])
    assert keys and not keys & {"shards", "dask_address"}
    assert plan(load_config("micro", ["collect.k=3"]))["collect_trajectories"] != plan(base)["collect_trajectories"]
    with pytest.raises(ValidationError, match="collect.dask_address"):
        load_config("micro", ["collect.dask_address=tcp://host:8786/status"])
    with pytest.raises(ValidationError, match="collect.shards"):
        load_config("micro", ["collect.shards=0"])


@pytest.mark.slow  # a two-worker Dask cluster: about a minute on 2 loaded cores
def test_collection_fans_out_over_a_local_dask_cluster(tmp_path, openai_server, monkeypatch, prefect_api):
    from prefect.artifacts import Artifact

    openai_server.responder = responder
    single = collect_only(_cfg(tmp_path, "single", openai_server))
    sharded_cfg = _cfg(tmp_path, "sharded", openai_server, "collect.shards=2")
    sharded = collect_only(sharded_cfg)

    # Same fingerprint, same rows (rewards, traj_ids, dialogues), same turns and summary.
    assert Path(single).name == Path(sharded).name
    (t1, u1, s1), (t2, u2, s2) = _outputs(single), _outputs(sharded)
    assert len(t1) == 12 and t1 == t2 and u1 == u2 and s1 == s2
    assert len({t["reward"] for t in t1}) > 1 and {t["n_turns"] for t in t1} == {1, 2}
    assert s2["resumed_episodes"] == 0

    # The episodes came from two Dask worker processes, neither of them this one; every shard's tasks are its own.
    table = json.loads(Artifact.get(f"collect-shards-{Path(sharded).name}").data)
    assert sorted(r["shard"] for r in table) == [0, 1] and sum(r["collected"] for r in table) == 12
    assert all(r["collected"] > 0 and r["worker"] != "" for r in table)
    assert len({r["pid"] for r in table}) == 2 and os.getpid() not in {r["pid"] for r in table}

    # A rerun is a cache hit: no cluster, nothing rewritten.
    monkeypatch.setattr(collect_task, "dask_task_runner", _no_cluster)
    stamp = (Path(sharded) / "manifest.json").stat().st_mtime_ns
    assert collect_only(sharded_cfg) == sharded
    assert (Path(sharded) / "manifest.json").stat().st_mtime_ns == stamp

    # Killed after the last episode but before the tables: the rerun finishes without a cluster, all resumed.
    (Path(sharded) / "manifest.json").unlink()
    (Path(sharded) / "trajectories.parquet").unlink()
    assert collect_only(sharded_cfg) == sharded
    t3, u3, s3 = _outputs(sharded)
    assert t3 == t1 and u3 == u1 and s3 == {**s1, "resumed_episodes": 12}


def test_an_unreachable_scheduler_names_the_field(tmp_path, openai_server, monkeypatch, prefect_api):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(collect_task, "CONNECT_TIMEOUT_S", 2.0)
    cfg = _cfg(tmp_path, "down", openai_server, "collect.shards=2", f"collect.dask_address=tcp://127.0.0.1:{port}")
    with pytest.raises(ConnectionError, match=rf"collect.dask_address='tcp://127.0.0.1:{port}': no Dask scheduler"):
        collect_only(cfg)
    assert not openai_server.requests  # nothing was rolled out


def test_a_remote_cluster_needs_a_prefect_api_it_can_reach():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    remote = load_config("micro", ["collect.shards=2", "collect.dask_address=tcp://10.0.0.5:8786"])
    local = load_config("micro", ["collect.shards=2", "collect.dask_address=tcp://127.0.0.1:8786"])
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        with pytest.raises(RuntimeError, match=r"collect.dask_address='tcp://10.0.0.5:8786' is on another machine.*"
                                               r"PREFECT_API_URL"):
            collect_task.workers_api_url(remote)
        assert collect_task.workers_api_url(local) == "http://127.0.0.1:4200/api"
    with temporary_settings(updates={PREFECT_API_URL: "http://10.0.0.2:4200/api"}):
        assert collect_task.workers_api_url(remote) == "http://10.0.0.2:4200/api"
