"""Stage 4 — train the critic: Bradley–Terry over trajectory pairs, advantages read off the critic LM's own head
as the mean token log-ratio to the frozen initial model, conditioned on the training-time information c."""

from __future__ import annotations

from pathlib import Path

from sweet import tracking
from sweet.algos import critic as sweet_critic
from sweet.models import resolve_model
from sweet.store import loads, read_rows


def train_critic(cfg, out: Path, pairs_dir: str) -> dict:
    rows = read_rows(Path(pairs_dir) / "pairs.parquet")
    if not rows:
        raise ValueError(
            f"{pairs_dir}/pairs.parquet holds no preference pairs: every trajectory of each task got the same "
            "reward, so there is nothing to learn. Collect more trajectories per task (collect.k) or sample "
            "with more diversity (collect.temperature).")
    pairs = [{"chosen": loads(r["chosen_messages"]), "rejected": loads(r["rejected_messages"]),
              "training_info": r["training_info"]} for r in rows]
    run_id = (out / tracking.RUN_ID_FILE).read_text().strip()
    base = resolve_model(cfg.models.critic_base, cfg.models.cache_dir)
    sweet_critic.train_critic(pairs, base, out, cfg.critic, callbacks=[tracking.trainer_callback(cfg, run_id)])
    return {"pairs": len(pairs)}
