#!/usr/bin/env python
"""Score several trained critics on the SAME held-out episodes: pair accuracy and best-of-N, side by side.

The evaluate stage scores a method's critic on that method's own episodes, so two runs' critics are never compared
on one set there. This script takes one evaluate output (e.g. zero_shot's, which every run of a profile shares)
and runs `sweet.stages.diagnostics.critic_diagnostics` for each critic folder. A diagnostic only: choosing a
hyper-parameter on held-out tasks would be tuning on the test set.

  .venv/bin/python scripts/critic_heldout.py --profile laptop \
      --episodes artifacts/laptop/evaluate/<fp>/eval_results.parquet --method zero_shot \
      --critic D=artifacts/laptop/train_critic/<fp1>/critic --critic E=artifacts/laptop/train_critic/<fp2>/critic
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweet.config import load_config  # noqa: E402
from sweet.stages.diagnostics import OUT_FILE, critic_diagnostics  # noqa: E402
from sweet.store import read_rows  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="laptop")
    ap.add_argument("--episodes", required=True, type=Path, help="an evaluate stage's eval_results.parquet")
    ap.add_argument("--method", default="zero_shot", help="whose episodes in that file (default zero_shot)")
    ap.add_argument("--mode", default="multi_turn")
    ap.add_argument("--critic", action="append", required=True, metavar="NAME=DIR",
                    help="a train_critic output's critic/ folder; repeat for each critic")
    ap.add_argument("--out", type=Path, default=None, help="where each critic's report goes (default: a temp dir)")
    args = ap.parse_args(argv)
    if not args.episodes.exists():
        ap.error(f"{args.episodes} does not exist")
    cfg = load_config(args.profile, [])
    rows = [r for r in read_rows(args.episodes) if r["method"] == args.method and r["mode"] == args.mode]
    if not rows:
        ap.error(f"{args.episodes} has no {args.method}/{args.mode} episodes")
    critics = [spec.partition("=")[::2] for spec in args.critic]
    for spec, (name, folder) in zip(args.critic, critics):  # all checked before the first (minutes-long) scoring
        if not name or not folder or not Path(folder).is_dir():
            ap.error(f"--critic {spec!r}: expected NAME=DIR with an existing critic folder")
    out_root = args.out or Path(tempfile.mkdtemp(prefix="critic-heldout-"))
    print(f"{len(rows)} {args.method}/{args.mode} episodes; reports under {out_root}")
    print("| critic | held-out pairs | pair accuracy [95% over tasks] | best-of-N reward (critic / oracle) |")
    print("|---|---|---|---|")
    for name, folder in critics:
        out = out_root / name
        out.mkdir(parents=True, exist_ok=True)
        critic_diagnostics(cfg, out, rows, Path(folder), None)
        rep = json.loads((out / OUT_FILE).read_text())
        acc = rep["pair_accuracy"]
        shown = ("— (no pair of episodes differs enough)" if acc["accuracy"] is None
                 else f"{acc['accuracy']:.3f} [{acc['accuracy_ci'][0]:.3f}, {acc['accuracy_ci'][1]:.3f}]")
        curve = ", ".join(f"N={n}: {v['critic']:.3f} / {v['oracle']:.3f}" for n, v in rep["best_of_n"].items())
        print(f"| {name} | {acc['pairs']} | {shown} | {curve} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
