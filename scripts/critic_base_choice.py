"""Which critic base ranks better? Train one critic per base LM on the preference pairs of most TRAIN tasks and
measure pair accuracy on the pairs of the other train tasks (a validation split by task; held-out tasks are never
read). Same critic config as the profile's, same pairs, same seed; prints a table and writes it as JSON.

    .venv/bin/python scripts/critic_base_choice.py --profile laptop \
        --bases HuggingFaceTB/SmolLM2-135M-Instruct,Qwen/Qwen2.5-Coder-0.5B-Instruct

It reads the profile's stored `build_preference_pairs` output (run `sweet run --profile P --stage
build_preference_pairs` first) and trains into artifacts/<experiment>/critic_base_choice/.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweet.algos import critic as sweet_critic  # noqa: E402
from sweet.algos.scoring import load_any_critic, score_trajectory_any  # noqa: E402
from sweet.config import load_config  # noqa: E402
from sweet.models import resolve_model  # noqa: E402
from sweet.pipeline import is_done  # noqa: E402
from sweet.stages import plan  # noqa: E402
from sweet.stages.critic import critic_pair  # noqa: E402
from sweet.stages.diagnostics import ordered  # noqa: E402
from sweet.store import read_rows  # noqa: E402


def stored_pairs_dir(cfg) -> Path:
    """The profile's finished build_preference_pairs folder."""
    d = Path(plan(cfg)["build_preference_pairs"])
    if not is_done(d):
        raise SystemExit(f"{d} is not finished: run `sweet run --profile <profile> --stage build_preference_pairs`")
    return d


def split_by_task(rows: list[dict], val_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    tasks = sorted({r["task_id"] for r in rows})
    random.Random(seed).shuffle(tasks)
    val = set(tasks[:max(1, round(len(tasks) * val_fraction))])
    return [r for r in rows if r["task_id"] not in val], [r for r in rows if r["task_id"] in val]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="laptop")
    ap.add_argument("--bases", required=True, help="comma-separated critic base models")
    ap.add_argument("--val-fraction", type=float, default=0.25, help="share of the pairs' train tasks held out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (as sweet run)")
    args = ap.parse_args(argv)
    cfg = load_config(args.profile, args.set)
    rows = read_rows(stored_pairs_dir(cfg) / "pairs.parquet")
    train, val = split_by_task(rows, args.val_fraction, args.seed)
    out_root = cfg.root / "critic_base_choice"
    results = []
    for base in [b.strip() for b in args.bases.split(",") if b.strip()]:
        out = out_root / base.replace("/", "__")
        t0 = time.perf_counter()
        critic_dir = sweet_critic.train_critic([critic_pair(r) for r in train], resolve_model(base, cfg.models.cache_dir),
                                               out, cfg.critic, device=cfg.models.device)
        train_s = time.perf_counter() - t0
        critic = load_any_critic(critic_dir, cfg.models.device)
        hits = [ordered(*(score_trajectory_any(critic, p[s], p["training_info"]) for s in ("chosen", "rejected")))
                for p in map(critic_pair, val)]
        acc = sum(hits) / len(hits) if hits else float("nan")
        results.append({"base": base, "train_pairs": len(train), "val_pairs": len(val), "val_pair_accuracy": acc,
                        "train_s": round(train_s, 1)})
        print(json.dumps(results[-1]), flush=True)
    (out_root / "results.json").write_text(json.dumps(results, indent=1))
    print("\n| critic base | train pairs | validation pairs | validation pair accuracy | training time |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['base']} | {r['train_pairs']} | {r['val_pairs']} | {r['val_pair_accuracy']:.3f} | "
              f"{r['train_s'] / 60:.1f} min |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
