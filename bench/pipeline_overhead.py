#!/usr/bin/env python
"""Pipeline overhead: the orchestration share of a `sweet-rl` flow run, and a fully cached rerun.

Runs `flows.full.full` in this process, through Prefect (a temporary local server, as `sweet run` does when no
PREFECT_API_URL is set; PREFECT_HOME and the result storage are in a temporary folder), MLflow (a fresh sqlite
store) and DuckDB, on a fresh temporary artifacts dir, twice:

  first run        every stage computes; flow wall time vs the sum of the stages' own compute, i.e. the time
                   inside each stage function (`Stage.fn`, timed by a wrapper this script installs; where a stage ran
                   elsewhere, its manifest's wall_s).  Orchestration share = 1 - compute / wall: Prefect task and
                   flow runs, fingerprints and cache keys, MLflow parent and stage runs, the DuckDB catalog, the
                   results report.
  cached rerun     same config: every stage is a Prefect cache hit; ratio = first-run wall / cached wall.

One-time start-up is reported apart and counted in neither run: importing the libraries, starting Prefect's
temporary server (a throw-away flow) and creating the MLflow store.  The manifests' wall_s (stage function plus
opening its MLflow stage run) are listed too.

The default, the `micro` profile with method=zero_shot (generate tasks + evaluate on SmolLM2-135M), takes about a
minute on 2 cores.  The issue's "orchestration share of a tiny run" is `--profile tiny --method sweet`: all seven
stages with Qwen2.5-Coder-0.5B, on the order of an hour or more on 2 cores.

  python bench/pipeline_overhead.py                                   # micro, zero_shot (~1 min)
  python bench/pipeline_overhead.py --method sweet                    # micro, all seven stages (several minutes)
  python bench/pipeline_overhead.py --profile tiny --method sweet     # the tiny run (long)
  python bench/pipeline_overhead.py --set evaluate.max_new_tokens=16 --keep
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def isolate_env(tmp: Path, log_level: str) -> None:
    """Orchestrator state in `tmp`, as the test suite does; set before Prefect is imported."""
    os.environ["PREFECT_HOME"] = str(tmp / "prefect")
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp / "prefect-results")
    os.environ["PREFECT_LOGGING_LEVEL"] = log_level
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", log_level)
    for k, v in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
                 "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1",
                 "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}.items():
        os.environ.setdefault(k, v)


def time_stage_functions() -> dict[str, float]:
    """Wrap every registered stage's function with a timer (Stage is frozen; the flow's tasks hold these objects)."""
    from sweet import stages as S

    spent: dict[str, float] = defaultdict(float)
    for st in S.STAGES:
        def timed(*a, _fn=st.fn, _name=st.name, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[_name] += time.perf_counter() - t
        object.__setattr__(st, "fn", timed)
    return spent


def manifests(root: Path) -> dict[str, float]:
    """Stage name -> summed manifest wall_s over every stage folder under artifacts/<experiment>/."""
    from sweet.stages import STAGES

    walls: dict[str, float] = defaultdict(float)
    for m in root.glob("*/*/manifest.json"):
        data = json.loads(m.read_text())
        walls[data["stage"]] += float(data.get("wall_s", 0.0))
    order = [s.name for s in STAGES]  # the pipeline's order
    return {k: walls[k] for k in sorted(walls, key=lambda k: (order.index(k) if k in order else len(order), k))}


def task_states(flow_run_id) -> dict[str, int]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    counts: dict[str, int] = defaultdict(int)
    for r in runs:
        counts[r.state.name] += 1
    return dict(counts)


def main(argv=None) -> int:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="micro", help="config profile (default: %(default)s)")
    ap.add_argument("--method", default="zero_shot", help="method to run (default: %(default)s: generate + evaluate)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override, dotted, repeatable (as `sweet run --set`)")
    ap.add_argument("--models-dir", default=str(ROOT / "artifacts" / "models"),
                    help="converted models folder, models.cache_dir (default: %(default)s)")
    ap.add_argument("--cached-runs", type=int, default=2, help="fully cached reruns; the fastest is reported "
                    "(default 2)")
    ap.add_argument("--log-level", default="WARNING", help="Prefect log level (default WARNING)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (artifacts, Prefect home)")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="sweet-bench-p5-"))
    if not args.keep:  # registered first, so it runs after Prefect has stopped its temporary server
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    isolate_env(tmp, args.log_level)

    t = time.perf_counter()
    import mlflow  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from prefect import flow

    from flows.full import full
    from sweet.config import load_config
    import_s = time.perf_counter() - t

    cfg = load_config(args.profile, [f"artifacts_dir={tmp / 'artifacts'}", f"models.cache_dir={args.models_dir}",
                                     f"method={args.method}", *args.overrides])

    @flow(name="bench-warm-up")
    def warm_up() -> int:
        return 1

    t = time.perf_counter()
    warm_up()
    server_s = time.perf_counter() - t
    t = time.perf_counter()
    from sweet import tracking
    tracking.client(cfg).search_experiments()  # creates the sqlite store and runs its migrations
    mlflow_s = time.perf_counter() - t
    api = os.environ.get("PREFECT_API_URL") or "temporary local server"
    print(f"profile {args.profile}, method {cfg.method}, experiment {cfg.experiment}, policy {cfg.models.policy}; "
          f"{os.cpu_count()} CPUs\nPrefect: {api}; artifacts: {tmp / 'artifacts'}{' (kept)' if args.keep else ''}\n"
          f"one-time start-up, not counted: imports {import_s:.1f} s, Prefect start {server_s:.1f} s, "
          f"MLflow store {mlflow_s:.1f} s", flush=True)

    spent = time_stage_functions()
    t = time.perf_counter()
    state = full(cfg=cfg, return_state=True)
    first = time.perf_counter() - t
    if not state.is_completed():
        print(f"FAIL: the first run ended {state.name}: {state.message}", file=sys.stderr)
        return 1
    walls = manifests(cfg.root)
    spent_first = dict(spent)

    cached, cached_states = float("inf"), {}
    for _ in range(max(1, args.cached_runs)):
        t = time.perf_counter()
        again = full(cfg=cfg, return_state=True)
        secs = time.perf_counter() - t
        if not again.is_completed():
            print(f"FAIL: the cached rerun ended {again.name}: {again.message}", file=sys.stderr)
            return 1
        if secs < cached:
            cached, cached_states = secs, task_states(again.state_details.flow_run_id)
    recomputed = [k for k in spent if spent[k] != spent_first.get(k)]  # must be none in a cached rerun

    compute = 0.0
    print(f"\n{'stage (first run)':<30}{'stage fn s':>12}{'manifest wall_s':>17}")
    for name in walls:
        fn_s = spent_first.get(name) or walls[name]  # a stage that ran elsewhere (fan-out): its manifest
        compute += fn_s
        print(f"{name:<30}{fn_s:>12.2f}{walls[name]:>17.2f}")
    print(f"{'sum':<30}{compute:>12.2f}{sum(walls.values()):>17.2f}")
    print(f"\n{'run':<30}{'seconds':>12}")
    print(f"{'first run (flow wall)':<30}{first:>12.2f}")
    print(f"{'  stage compute':<30}{compute:>12.2f}")
    print(f"{'  orchestration':<30}{first - compute:>12.2f}   share {1 - compute / first:.1%} of the first run")
    print(f"{'fully cached rerun':<30}{cached:>12.2f}   task runs: "
          + ", ".join(f"{n} {s}" for s, n in sorted(cached_states.items())))
    print(f"orchestration share {1 - compute / first:.1%}; cached rerun {first / cached:.1f}x faster than the first "
          f"run ({first:.1f} s -> {cached:.2f} s)")
    if set(cached_states) - {"Cached"} or recomputed:
        print(f"FAIL: the rerun was not fully cached: {cached_states}, recomputed {recomputed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
