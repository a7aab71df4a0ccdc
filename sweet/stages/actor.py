"""Stage 6 — train the DPO actor on the critic-ranked per-turn pairs (DPO β plus an NLL term on the chosen)."""

from __future__ import annotations

from pathlib import Path

from sweet import tracking
from sweet.algos import actor as sweet_actor
from sweet.models import resolve_model
from sweet.store import loads, read_rows


def train_dpo_actor(cfg, out: Path, ranked_dir: str) -> dict:
    rows = read_rows(Path(ranked_dir) / "dpo_pairs.parquet")
    if not rows:
        raise ValueError(f"{ranked_dir}/dpo_pairs.parquet holds no DPO pairs: the candidates stage found no turns")
    data = [{"prompt": loads(r["prompt"]), "chosen": r["chosen"], "rejected": r["rejected"]} for r in rows]
    run_id = (out / tracking.RUN_ID_FILE).read_text().strip()
    base = resolve_model(cfg.models.policy, cfg.models.cache_dir)
    sweet_actor.train_actor(data, base, out, cfg.actor, callbacks=[tracking.trainer_callback(cfg, run_id)])
    return {"dpo_pairs": len(data)}
