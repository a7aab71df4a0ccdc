"""`python -m sweet.train STAGE --config CONFIG.json --out DIR INPUT_DIR...`: one training stage in this process.

What every process of `accelerate launch` runs when engine.launcher=accelerate (see `sweet.launch.run_launched`):
the same stage function as a single-process run, with the launcher switched to local so it trains here. The
Trainer reads its rank from the environment accelerate set; rank 0 writes the stage summary for the parent.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

STAGES = ("train_critic", "train_actor")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweet.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("--config", required=True, type=Path, help="the run's config (JSON, as sweet.launch wrote it)")
    parser.add_argument("--out", required=True, type=Path, help="the stage's output folder")
    parser.add_argument("inputs", nargs="+", help="the stage's input folders, in the stage's order")
    args = parser.parse_args(argv)

    from sweet.config import PipelineConfig
    from sweet.launch import LAUNCH_DIR, SUMMARY_FILE

    try:
        cfg = PipelineConfig.model_validate_json(args.config.read_text())
    except (OSError, ValueError) as e:
        parser.error(f"--config {args.config}: {e}")
    cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"launcher": "local"})})
    if args.stage == "train_critic":
        from sweet.stages.critic import train_critic as fn
    else:
        from sweet.stages.actor import train_actor as fn
    from sweet.precision import cpu_precision
    with cpu_precision(cfg.models.cpu_precision):  # as run_stage does for a single-process stage
        summary = fn(cfg, args.out, *args.inputs)
    if int(os.environ.get("RANK", "0")) == 0:
        summary = {**summary, "training_processes": int(os.environ.get("WORLD_SIZE", "1"))}
        tmp = args.out / LAUNCH_DIR / (SUMMARY_FILE + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(summary))
        tmp.replace(args.out / LAUNCH_DIR / SUMMARY_FILE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
