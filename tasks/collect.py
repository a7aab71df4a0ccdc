"""Prefect task: collect trajectories (see `sweet.stages.collect`).

With `collect.shards` > 1 the rollout fans out: the stage's task runs a subflow, `collect-shards`, whose Prefect
tasks (one per shard, a disjoint subset of the training tasks) run on a Dask cluster through
`prefect_dask.DaskTaskRunner` (the `dist` extra), each writing its episodes into the stage folder's `shards/`; the
stage then finishes in this process exactly as the single-process stage does (same tables, summary and manifest).
Each shard task reports its episodes to a progress artifact of its own.
The stage's fingerprint, cache key and resume rules are unchanged, so a cached stage never starts a cluster.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from prefect import flow, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

from sweet import progress
from sweet.config import PipelineConfig
from sweet.stages import COLLECT
from sweet.stages.collect import collect_shard, finish_collection, pending_episodes
from tasks._stage import PrefectProgress, cache_key, call, run

# How long to wait for a Dask scheduler given by `collect.dask_address` to answer and to have a worker.
CONNECT_TIMEOUT_S = 30.0


@task(name="collect trajectories", cache_key_fn=cache_key(COLLECT), persist_result=True)
def _collect_trajectories(cfg: PipelineConfig, tasks: str, parent_run_id: str | None = None) -> str:
    stage = COLLECT
    if cfg.collect.shards > 1 and not cfg.collect.offline_path:
        # Same name, config keys and code, so the same fingerprint and folder: only how the rollout runs changes.
        stage = dataclasses.replace(COLLECT, fn=fan_out, code_module=COLLECT.module)
    return run(stage, cfg, tasks, parent_run_id=parent_run_id)


def collect_trajectories(cfg: PipelineConfig, tasks: str, parent_run_id: str | None = None) -> str:
    """Returns the stage's output folder: artifacts/<experiment>/<stage>/<fingerprint>/."""
    return call(_collect_trajectories, COLLECT, cfg, tasks, parent_run_id=parent_run_id)


# ---- fan-out ----------------------------------------------------------------------------------------------------
def fan_out(cfg: PipelineConfig, out: Path, tasks_dir: str) -> dict:
    """The collect stage's function when `collect.shards` > 1: the shards that still miss episodes run on Dask
    (none missing: no cluster at all), then the stage's tables are written here."""
    n = cfg.collect.shards
    todo = [s for s in range(n) if pending_episodes(cfg, out, tasks_dir, s, n)]
    collected = 0
    if todo:
        # The shard tasks report to this flow's Prefect API: pass its address on (a temporary server of this
        # process has none in the settings, and each worker would otherwise start a server of its own).
        api_url = workers_api_url(cfg)
        runner = dask_task_runner(cfg, len(todo))
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            done = collect_shards.with_options(task_runner=runner)(
                _for_workers(cfg), str(Path(tasks_dir).resolve()), str(Path(out).resolve()), todo)
        collected = sum(d["collected"] for d in done)
    return finish_collection(out, collected)


@flow(name="collect-shards")
def collect_shards(cfg: PipelineConfig, tasks: str, out: str, shards: list[int]) -> list[dict]:
    """One `collect shard` task per shard, on the flow's task runner (a `DaskTaskRunner`); also a table artifact
    of where each shard ran."""
    futures = [_collect_shard.submit(cfg, tasks, out, s, cfg.collect.shards) for s in shards]
    wait(futures)  # let every shard finish (its episodes are kept) before a failed one is raised
    done = [f.result() for f in futures]
    create_table_artifact(key=f"collect-shards-{Path(out).name}", table=done,
                          description=f"collect_trajectories/{Path(out).name}: where each shard ran")
    return done


@task(name="collect shard", task_run_name="collect shard {shard} of {n_shards}", cache_policy=NO_CACHE,
      persist_result=False)
def _collect_shard(cfg: PipelineConfig, tasks: str, out: str, shard: int, n_shards: int) -> dict:
    started = time.time()
    with progress.reporting(PrefectProgress(f"{cfg.experiment} collect shard {shard + 1} of {n_shards}")):
        done = collect_shard(cfg, Path(out), tasks, shard, n_shards)
    return {**done, "worker": _dask_worker(), "host": socket.gethostname(), "pid": os.getpid(),
            "wall_s": round(time.time() - started, 2)}


def dask_task_runner(cfg: PipelineConfig, n_shards: int):
    """`collect.dask_address` set: that cluster (checked first, so a wrong address fails at once, naming the field);
    empty: a temporary local cluster of min(n_shards, CPUs) worker processes, one thread each, on 127.0.0.1, no
    dashboard."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as e:
        raise ImportError(f"collect.shards={cfg.collect.shards} runs the shards on Dask, which needs the `dist` "
                          "extra: pip install -e '.[dist]'") from e
    c = cfg.collect
    if c.dask_address:
        check_scheduler(c.dask_address)
        return DaskTaskRunner(address=c.dask_address, client_kwargs={"timeout": CONNECT_TIMEOUT_S})
    return DaskTaskRunner(cluster_kwargs={
        "n_workers": max(1, min(n_shards, os.cpu_count() or 1)), "processes": True, "threads_per_worker": 1,
        "host": "127.0.0.1", "dashboard_address": None,
        "memory_limit": 0,  # a worker holds whole models: no Dask memory limit (and no restart on reaching it)
    })


def check_scheduler(address: str) -> None:
    """A scheduler answers at `address` and has at least one worker, within CONNECT_TIMEOUT_S."""
    import distributed

    what = f"collect.dask_address={address!r}"
    try:
        with distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False) as client:
            try:
                client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError):
                raise ConnectionError(f"{what}: the Dask scheduler there has no workers after "
                                      f"{CONNECT_TIMEOUT_S:g} s; start one on each machine with "
                                      f"`dask worker {address} --nthreads 1`") from None
    except ConnectionError:
        raise
    except (OSError, TimeoutError) as e:
        raise ConnectionError(f"{what}: no Dask scheduler answered within {CONNECT_TIMEOUT_S:g} s ({e}). Start one "
                              "with `dask scheduler` (and `dask worker <address>` on each machine), or leave "
                              "collect.dask_address empty for a temporary local cluster") from None


def workers_api_url(cfg: PipelineConfig) -> str:
    """The Prefect API the shard tasks report to: this process's. A cluster on other machines cannot reach an API
    on this machine's loopback interface: refused here with what to do, rather than failing on the workers."""
    url = get_current_settings().api.url
    if not url:  # no PREFECT_API_URL: this process runs a temporary server
        from prefect.client.orchestration import get_client
        url = str(get_client(sync_client=True).api_url)
    address = cfg.collect.dask_address
    if address and not _is_loopback(_host(address)) and _is_loopback(_host(url)):
        raise RuntimeError(
            f"collect.dask_address={address!r} is on another machine, but the Prefect API its shard tasks would "
            f"report to ({url}) listens on this machine's loopback interface only. Run a Prefect server the workers "
            "can reach (e.g. `prefect server start --host <this machine's private address>`) and set "
            "PREFECT_API_URL to it on this machine.")
    return url


def _for_workers(cfg: PipelineConfig) -> PipelineConfig:
    """Paths a worker reads or writes, made absolute (a worker may run in another folder; on other machines the
    same absolute paths must reach the shared filesystem)."""
    return cfg.model_copy(update={
        "artifacts_dir": str(Path(cfg.artifacts_dir).resolve()),
        "models": cfg.models.model_copy(update={"cache_dir": str(Path(cfg.models.cache_dir).resolve())}),
    })


def _dask_worker() -> str:
    try:
        from distributed import get_worker
        return str(get_worker().name)
    except (ImportError, ValueError):  # not on a Dask worker
        return ""


def _host(address: str) -> str:
    return urlsplit(address if "://" in address else f"tcp://{address}").hostname or ""


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")
