"""Stage 6 — train the actor. SWEET-RL (and its critic ablations): DPO β plus an NLL term on the critic-ranked
per-turn pairs. Baselines on the same data: `rft` fine-tunes on the successful collected trajectories, `mt_dpo`
runs trajectory-level DPO on the preference pairs (no critic)."""

from __future__ import annotations

from pathlib import Path

from sweet import launch
from sweet.models import resolve_model
from sweet.store import loads, read_rows


def train_actor(cfg, out: Path, data_dir: str) -> dict:
    if cfg.engine.launcher == "accelerate":  # every GPU of the node(s): this same function in each process
        return launch.run_launched("train_actor", cfg, out, [data_dir])
    base = resolve_model(cfg.models.policy, cfg.models.cache_dir)
    kw = dict(callbacks=launch.trainer_callbacks(cfg, out), device=cfg.models.device)
    actor = cfg.actor.for_method(cfg.method)  # a baseline's own epochs / batch (actor.rft_*, actor.mt_dpo_*)
    if cfg.method == "rft":
        from sweet.algos.baselines import train_rft
        trajs = read_rows(Path(data_dir) / "trajectories.parquet")
        kept = [t for t in trajs if t["reward"] >= cfg.actor.rft_min_reward]
        if cfg.actor.rft_best_per_task:
            best = {}
            for t in sorted(kept, key=lambda t: (-t["reward"], t["sample_idx"])):
                best.setdefault(t["task_id"], t)
            kept = list(best.values())
        kept = [{"messages": loads(t["messages"])} for t in kept]
        if not kept:
            best = max((t["reward"] for t in trajs), default=0.0)
            raise ValueError(f"rft: no trajectory in {data_dir} reaches actor.rft_min_reward="
                             f"{cfg.actor.rft_min_reward} (best reward {best:.2f}); lower it or collect more")
        train_rft(kept, base, out, actor, **kw)
        return {"sft_trajectories": len(kept), "of_trajectories": len(trajs)}
    if cfg.method == "mt_dpo":
        from sweet.algos.baselines import train_mt_dpo
        rows = read_rows(Path(data_dir) / "pairs.parquet")
        if not rows:
            raise ValueError(f"{data_dir}/pairs.parquet holds no preference pairs: nothing for multi-turn DPO")
        train_mt_dpo([{"chosen": loads(r["chosen_messages"]), "rejected": loads(r["rejected_messages"])}
                      for r in rows], base, out, actor, **kw)
        return {"trajectory_pairs": len(rows)}
    from sweet.algos import actor as sweet_actor
    rows = read_rows(Path(data_dir) / "dpo_pairs.parquet")
    if not rows:
        raise ValueError(f"{data_dir}/dpo_pairs.parquet holds no DPO pairs: the candidates stage found no turns")
    data = [{"prompt": loads(r["prompt"]), "chosen": r["chosen"], "rejected": r["rejected"]} for r in rows]
    sweet_actor.train_dpo(data, base, out, actor, **kw)
    return {"dpo_pairs": len(data)}
