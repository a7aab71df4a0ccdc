"""`sweet`: run the experiment, one stage of it, or inspect its config and outputs.

  sweet run                                   # the sweet-rl flow on the tiny profile
  sweet run --profile micro --set collect.k=4 # another profile, one field changed
  sweet run --stage train_critic --force      # rerun one stage against the stored upstream outputs
  sweet run --set method=rft                  # a baseline or ablation (see `sweet config` for the list)
  sweet compare --profile tiny                # every method on the same data, then one comparison table
  sweet config --profile tiny                 # the resolved config as JSON
  sweet status                                # which stages of this config are done, and where
  sweet status --code                         # ... and the modules and files each stage's code hash covers
  sweet eval-backend --tasks T.jsonl --answers A.jsonl   # score answers in the sandbox, one JSON line each
  sweet eval-frontend --tasks T.jsonl --answers A.jsonl --screenshots shots/   # render + page similarity
  sweet run --set task_family=frontend        # the frontend family through the same seven stages
  sweet evaluate --agent api:gpt-4o --agent HuggingFaceTB/SmolLM2-135M-Instruct \
      --set tasks.source=official:data/colbench --set evaluate.max_turns=10   # any models, one results table

API models (`api:<model>` or `api:<model>@<base_url>`) read their key from $OPENAI_API_KEY (see --set api.key_env).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from sweet.config import METHODS, PROFILES, load_config, with_method
from sweet.graph import ALIASES, STAGE_NAMES, canonical


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="tiny", choices=sorted(PROFILES), help="base profile (default: tiny)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field, e.g. --set collect.k=8 (repeatable; values parse as JSON)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the sweet-rl flow (or one stage) through Prefect")
    _config_args(run)
    run.add_argument("--stage", choices=[*STAGE_NAMES, *ALIASES], help="rerun only this stage against stored upstream outputs")
    run.add_argument("--force", action="store_true", help="with --stage: run it even if its outputs exist "
                     "(the old folder is moved aside, not deleted)")
    cfg = sub.add_parser("config", help="print the resolved config as JSON")
    _config_args(cfg)
    st = sub.add_parser("status", help="show each stage's output folder for this config and whether it is done")
    _config_args(st)
    st.add_argument("--code", action="store_true", help="also list the modules and files that make up each "
                    "stage's code fingerprint (the import closure of its module inside sweet/), with their hash")
    ev = sub.add_parser("eval-backend", help="score backend answers in the sandbox; one JSON line per answer")
    ev.add_argument("--tasks", required=True, help="jsonl with ground_truth and test_cases (task_id optional)")
    ev.add_argument("--answers", required=True, help='jsonl rows {"task_id": ..., "answer": "<python code>"}')
    ev.add_argument("--workers", type=int, default=None, help="answers scored in parallel (default: all CPUs)")
    ev.add_argument("--timeout", type=float, default=2.0, help="seconds per test call (default 2; 'official' gives "
                    "each answer call 1 s, as the released code does)")
    ev.add_argument("--scoring", choices=("strict", "official"), default="strict", help="the scoring rules "
                    "(evaluate.scoring): this project's 'strict' (default) or the released code's 'official'")
    ef = sub.add_parser("eval-frontend", help="render HTML answers and reference pages offline; one JSON line per "
                        "answer with its similarity to the reference and the metric's name")
    ef.add_argument("--tasks", required=True, help="jsonl with ground_truth HTML (task_id optional: row index)")
    ef.add_argument("--answers", required=True, help='jsonl rows {"task_id": ..., "answer": "<html>"}')
    ef.add_argument("--screenshots", metavar="DIR", help="also write every screenshot (answers and references) here")
    ef.add_argument("--similarity", default="pixel", help="'pixel' (default; named fallback, not CLIP), "
                    "'clip:openai' or 'clip:<local weights file>'")
    ef.add_argument("--timeout", type=float, default=10.0, help="seconds a page gets to load (default 10)")
    ef.add_argument("--pool-size", type=int, default=4, help="pages rendered at once (default 4)")
    ef.add_argument("--javascript", action="store_true", help="run the pages' scripts (still offline)")
    cmp = sub.add_parser("compare", help="run the flow once per method (shared stages are cache hits) and print "
                         "one table comparing them")
    _config_args(cmp)
    cmp.add_argument("--methods", default=",".join(METHODS),
                     help=f"comma-separated (default: all: {','.join(METHODS)})")
    me = sub.add_parser("evaluate", help="evaluate models zero-shot on ColBench (no training; --set task_family=frontend "
                        "for pages); one table")
    _config_args(me)
    me.add_argument("--agent", action="append", default=[], metavar="MODEL",
                    help="a model id, a local folder or api:<model>[@base_url] (repeatable)")
    me.add_argument("--actor", action="append", default=[], metavar="FOLDER",
                    help="a trained actor (LoRA adapter folder, e.g. <train_actor dir>/actor) on models.policy")
    me.add_argument("--mode", action="append", choices=["multi_turn", "single_turn", "oracle"],
                    help="protocol(s) (repeatable; default: evaluate.modes of the config)")
    me.add_argument("--split", default="test", choices=["train", "test"], help="task split (default test)")
    me.add_argument("--n-tasks", type=int, default=0, help="first N tasks of the split (default: all)")
    me.add_argument("--out", type=Path, help="output folder (default artifacts/<experiment>/evals/<key>)")
    return parser


def _terminate(signum, frame):
    # Later signals are ignored while this one unwinds: a second `kill` would otherwise interrupt the clean-up itself
    # (it left Prefect's temporary API server running). SIGKILL still ends a clean-up that hangs.
    signal.signal(signal.SIGTERM, _stopping)
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def _stopping(signum, frame):
    print(f"sweet: signal {signum} ignored: already stopping (SIGKILL to end now)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # `kill` (SIGTERM) unwinds like Ctrl-C, so what this run started is stopped: the llama.cpp server, Prefect's
        # temporary API server (left running by a bare SIGTERM), worker pools.
        signal.signal(signal.SIGTERM, _terminate)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per API request is noise
    if args.command == "eval-backend":
        from sweet.colbench.eval_cli import eval_backend
        try:
            return eval_backend(args.tasks, args.answers, args.workers, args.timeout, scoring=args.scoring)
        except (ValueError, FileNotFoundError) as e:
            print(f"sweet eval-backend: {e}", file=sys.stderr)
            return 2
    if args.command == "eval-frontend":
        from sweet.colbench.eval_frontend import eval_frontend
        try:
            return eval_frontend(args.tasks, args.answers, args.screenshots, args.similarity, args.timeout,
                                 args.pool_size, args.javascript)
        except (ValueError, FileNotFoundError) as e:
            print(f"sweet eval-frontend: {e}", file=sys.stderr)
            return 2
    try:
        cfg = load_config(args.profile, args.overrides)
    except ValueError as e:  # pydantic's ValidationError is a ValueError too
        print(f"sweet: bad config: {e}", file=sys.stderr)
        return 2
    if args.command == "evaluate":
        return _evaluate(cfg, args)
    if args.command == "compare":
        return _compare(cfg, args.methods)
    if args.command == "config":
        print(json.dumps(cfg.model_dump(), indent=2))
        return 0
    if args.command == "status":
        return _status(cfg, args.code)
    # The orchestrator is imported only here: the library itself never depends on Prefect.
    if args.stage:
        from flows.stages import FLOWS
        print(FLOWS[canonical(args.stage)](cfg=cfg, force=args.force))
    else:
        from flows.full import full
        print(full(cfg=cfg))
    return 0


def _status(cfg, code: bool) -> int:
    from sweet import codehash
    from sweet.pipeline import is_done
    from sweet.stages import BY_NAME, plan

    for name, out in plan(cfg).items():
        print(f"{'done   ' if is_done(Path(out)) else 'pending'}  {name:28s} {out}")
        if code:
            module = BY_NAME[name].module
            closure = codehash.closure(module)
            print(f"    code {codehash.code_version(module)}: {len(closure.modules)} modules, "
                  f"{len(closure.files)} other files")
            for entry in sorted(closure.modules) + sorted(closure.files):
                print(f"      {entry}")
    return 0


def _compare(cfg, methods: str) -> int:
    from flows.full import full

    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(METHODS))
    if unknown:
        print(f"sweet compare: unknown methods {unknown}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    failed = {}
    for m in chosen:
        print(f"=== method {m} ===", flush=True)
        state = full(cfg=with_method(cfg, m), return_state=True)
        if not state.is_completed():
            failed[m] = str(state.message or state.name)
            print(f"method {m} failed: {failed[m]}", file=sys.stderr)
    table = cfg.root / "results.md"
    if table.exists():
        print(f"\nAll methods evaluated on these tasks ({table}):\n\n{table.read_text()}")
    for m, why in failed.items():
        print(f"FAILED {m}: {why}")
    return 1 if failed else 0


def _evaluate(cfg, args) -> int:
    from sweet.stages.evaluate import evaluate_models

    if args.mode:
        cfg.evaluate.modes = list(dict.fromkeys(args.mode))
    if not args.agent and not args.actor:
        print("sweet evaluate: give at least one --agent or --actor", file=sys.stderr)
        return 2
    try:
        out, _ = evaluate_models(cfg, args.agent, actors=args.actor, split=args.split, n_tasks=args.n_tasks,
                                 out=args.out)
    except (ValueError, FileNotFoundError) as e:
        print(f"sweet evaluate: {e}", file=sys.stderr)
        return 2
    print((out / "results.md").read_text())
    print(f"episodes, dialogues and results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
