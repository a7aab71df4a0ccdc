"""Stage 4 — train the critic: Bradley–Terry over trajectory pairs, advantages read off the critic LM's own head
as the mean token log-ratio to the frozen initial model, conditioned on the training-time information c.
The `value_head` ablation instead regresses a scalar head on the rewards of the collected trajectories; so does the
frontend's vision-language critic (critic.kind=vlm), reading the screenshots of the pages as well."""

from __future__ import annotations

import json
from pathlib import Path

from sweet import launch
from sweet.algos import critic as sweet_critic
from sweet.algos.training import LOG_FILE, first_pass_fit
from sweet.models import resolve_model
from sweet.pipeline import read_manifest
from sweet.store import loads, read_rows


def train_critic(cfg, out: Path, pairs_dir: str) -> dict:
    if cfg.critic.kind == "vlm":  # pages rendered once, here, before any launch: the processes read them from disk
        trajs = screened_trajectories(cfg, out, all_trajectories(pairs_dir))
    if cfg.engine.launcher == "accelerate":  # every GPU of the node(s): this same function in each process
        return launch.run_launched("train_critic", cfg, out, [pairs_dir])
    base = resolve_model(cfg.models.critic_base, cfg.models.cache_dir)
    callbacks, device = launch.trainer_callbacks(cfg, out), cfg.models.device
    if cfg.critic.kind == "vlm":
        from sweet.algos.vlm_critic import train_vlm_critic
        train_vlm_critic(trajs, base, out, cfg.critic, callbacks=callbacks, device=device)
        return {"trajectories": len(trajs)}
    if cfg.critic.head == "value":
        from sweet.algos.value_head import train_value_critic
        trajs = all_trajectories(pairs_dir)
        train_value_critic(trajs, base, out, cfg.critic, callbacks=callbacks, device=device)
        return {"trajectories": len(trajs)}
    rows = read_rows(Path(pairs_dir) / "pairs.parquet")
    if not rows:
        raise ValueError(
            f"{pairs_dir}/pairs.parquet holds no preference pairs: no task had trajectories the pair rule "
            f"('{cfg.pairs.rule}') could order. Collect more trajectories per task (collect.k), sample with more "
            "diversity (collect.temperature), or use pairs.rule=margin.")
    pairs = [critic_pair(r) for r in rows]
    final = sweet_critic.train_critic(pairs, base, out, cfg.critic, callbacks=callbacks, device=device)
    return {"pairs": len(pairs)} | critic_fit(final)


def critic_fit(final: Path) -> dict:
    """How well the critic orders pairs it has not trained on yet: the BT accuracy and margin of the second half of
    its first epoch (each batch logged before it is learned from). A critic that has not learned (accuracy near 0.5,
    margin near 0) ranks candidates by noise; in the laptop runs one at 0.62 taught the actor the opposite of the
    data's lesson (README, *Run R*)."""
    log = Path(final) / LOG_FILE
    return first_pass_fit(json.loads(log.read_text()), ("reward_accuracy", "reward_margin")) if log.exists() else {}


def critic_pair(row: dict) -> dict:
    """A `pairs` row as the critic trainer reads it: (chosen, rejected) dialogues and the training info c."""
    return {"chosen": loads(row["chosen_messages"]), "rejected": loads(row["rejected_messages"]),
            "training_info": row["training_info"]}


def all_trajectories(pairs_dir: str) -> list[dict]:
    """Every collected trajectory (a regression head learns from each one's reward, not only the paired ones)."""
    trajs_dir = read_manifest(pairs_dir)["inputs"][0]
    return [{"messages": loads(t["messages"]), "reward": t["reward"], "training_info": t["training_info"]}
            for t in read_rows(Path(trajs_dir) / "trajectories.parquet")]


def screened_trajectories(cfg, out: Path, trajs: list[dict]) -> list[dict]:
    """`trajs` with the screenshots a vlm critic reads: each assistant turn's page and the reference page (PNG
    bytes, None where there is no page). Every distinct page is rendered once (one pooled browser) and kept in
    `out/screens`, so a resumed stage or each training process reads them back instead."""
    from sweet.colbench.frontend import PageScreens
    from sweet.colbench.registry import frontend_renderer

    screens = PageScreens(lambda: frontend_renderer(cfg), folder=Path(out) / "screens", keep=10 ** 9)
    texts = [[m["content"] for m in t["messages"] if m["role"] == "assistant"] + [t["training_info"]] for t in trajs]
    try:
        pngs = screens([x for row in texts for x in row])
    finally:
        screens.close()
    out_rows, i = [], 0
    for t, row in zip(trajs, texts):
        shots, i = pngs[i:i + len(row)], i + len(row)
        out_rows.append(dict(t, turn_images=shots[:-1], info_image=shots[-1]))
    return out_rows
