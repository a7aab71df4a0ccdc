"""Stage 5 — sample and rank candidates: for offline turns, N actions from the policy given the history o_t only,
each scored by the critic given c; a DPO pair = one from the top half (chosen) and one from the bottom half."""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

from sweet import progress
from sweet.agents import load_chat
from sweet.algos import actor as sweet_actor
from sweet.algos import scoring
from sweet.records import Candidate, DpoPair
from sweet.stages.collect import close_models
from sweet.store import Shards, dumps, loads, read_rows, write_rows


def offline_turns(trajs: list[dict], fraction: float, cap: int, seed: int) -> list[dict]:
    """Every agent turn of the offline data as (history, c); a seeded share of them, at most `cap`."""
    turns = []
    for t in trajs:
        msgs = loads(t["messages"])
        k = 0
        for i, m in enumerate(msgs):
            if m["role"] == "assistant":
                turns.append({"turn_id": f"{t['traj_id']}__t{k}", "traj_id": t["traj_id"], "task_id": t["task_id"],
                              "turn": k, "history": msgs[:i], "training_info": t["training_info"]})
                k += 1
    rng = random.Random(seed)
    n = min(cap, max(1, round(len(turns) * fraction))) if turns else 0
    return sorted(rng.sample(turns, n), key=lambda r: r["turn_id"])


def last_backend_turn(history: list[dict], cfg) -> bool:
    """A backend episode's last turn: the environment ends the history with its last-turn note."""
    from sweet.colbench.backend import Episode

    return cfg.task_family == "backend" and bool(history) and history[-1]["content"].endswith(Episode.LAST_NOTE)


def agent_prompt(history: list[dict], cfg) -> list[dict]:
    """What the policy continues for a turn's candidates: as in the rollout, a last turn is begun for it when
    `backend.answer_prefill` is on, so candidates and episodes match."""
    from sweet.colbench.backend import Episode

    if cfg.backend.answer_prefill and last_backend_turn(history, cfg):
        return history + [{"role": "assistant", "content": Episode.PREFILL}]
    return history


def never_chosen(history: list[dict], cfg):
    """Before a backend episode's last turn, a candidate holding code without the answer marker
    (`candidates.unmarked_code=rank_last`) or the marker without a function that parses
    (`candidates.unparsed_answer=rank_last`) may be rejected, never chosen (None: every candidate ranks by its
    score, as in the paper)."""
    c = cfg.candidates
    rules = [f for on, f in ((c.unmarked_code == "rank_last", sweet_actor.unmarked_code),
                             (c.unparsed_answer == "rank_last", sweet_actor.unparsed_answer)) if on]
    if not rules or cfg.task_family != "backend" or last_backend_turn(history, cfg):
        return None
    return lambda d: any(f(d["candidate"]) for f in rules)


def critic_flags(cfg) -> dict:
    """How the configured critic scores an action (shared by candidate ranking and best-of-N)."""
    # The released code's ranking does not condition the reference term on c.
    return {"length_norm": cfg.critic.length_norm, "use_training_info": cfg.critic.use_training_info,
            "ref_with_training_info": cfg.critic.variant == "paper"}


def critic_screens(cfg):
    """What a vlm critic (critic.kind=vlm) reads pages with: a `PageScreens` over the run's page renderer (started
    the first time a page is rendered; close it after use); None for a text critic."""
    if cfg.critic.kind != "vlm":
        return None
    from sweet.colbench.frontend import PageScreens
    from sweet.colbench.registry import frontend_renderer
    return PageScreens(lambda: frontend_renderer(cfg))


def sample_and_rank_candidates(cfg, out: Path, trajs_dir: str, critic_dir: str) -> dict:
    c = cfg.candidates
    turns = offline_turns(read_rows(Path(trajs_dir) / "trajectories.parquet"), c.turn_fraction, c.max_turns, c.seed)
    shards = Shards(out / "shards")  # one file per turn: its N scored candidates
    todo = [t for t in turns if not shards.done(t["turn_id"])]
    if todo:
        # transformers or vLLM (engine.backend): N samples per prompt, and the critic's prompt log-probs.
        policy = load_chat(cfg.models.policy, cfg, batch=c.batch_size)
        # A vlm critic reads each candidate's page: rendered once per turn, in one pooled batch.
        critic = scoring.load_any_critic(Path(critic_dir) / "critic", policy.device, cfg, critic_screens(cfg))
        group = max(1, policy.batch_size // c.n)
        try:
            with progress.Bar(len(todo), "candidates", "turn") as bar:  # counts turns, not generate calls
                for s in range(0, len(todo), group):
                    chunk = todo[s:s + group]
                    samples = policy.generate([agent_prompt(t["history"], cfg) for t in chunk], c.max_new_tokens, c.temperature,
                                              seed=c.seed + s, num_return_sequences=c.n)
                    for j, t in enumerate(chunk):
                        cands = samples[j * c.n:(j + 1) * c.n]
                        scores = scoring.score_any(critic, t["history"], cands, t["training_info"],
                                                   **critic_flags(cfg))
                        shards.write(t["turn_id"], [asdict(Candidate(
                            turn_id=t["turn_id"], traj_id=t["traj_id"], task_id=t["task_id"], turn=t["turn"],
                            cand_idx=i, text=x, score=float(sc), history=dumps(t["history"])))
                            for i, (x, sc) in enumerate(zip(cands, scores))])
                        bar.update()
        finally:  # vLLM engines hold their GPU memory until closed; the actor stage needs it next
            close_models(policy, critic.model, critic.screenshots)
    rows = sorted(shards.read_all(), key=lambda r: (r["turn_id"], r["cand_idx"]))
    write_rows(rows, out / "candidates.parquet")
    rng = random.Random(c.seed)
    by_turn: dict[str, list[dict]] = {}
    for r in rows:
        by_turn.setdefault(r["turn_id"], []).append(r)
    dpo, demoted = [], 0
    for turn_id, group_rows in by_turn.items():
        scored = [{"candidate": r["text"], "score": r["score"]} for r in group_rows]
        rule = never_chosen(loads(group_rows[0]["history"]), cfg)
        demoted += sum(map(rule, scored)) if rule else 0
        for chosen, rejected in sweet_actor.select_pairs(scored, c.pairs_per_turn, rng, never_chosen=rule):
            first = group_rows[0]
            dpo.append(asdict(DpoPair(turn_id=turn_id, task_id=first["task_id"], prompt=first["history"],
                                      chosen=chosen["candidate"], rejected=rejected["candidate"],
                                      chosen_score=chosen["score"], rejected_score=rejected["score"])))
    write_rows(dpo, out / "dpo_pairs.parquet")
    spread = [max(r["score"] for r in g) - min(r["score"] for r in g) for g in by_turn.values()]
    first_turns = {tid for tid, g in by_turn.items() if g[0]["turn"] == 0}
    return {"turns": len(by_turn), "candidates": len(rows), "dpo_pairs": len(dpo),
            "mean_score_spread": sum(spread) / len(spread) if spread else 0.0, "never_chosen": demoted,
            **(first_turn_asking([p for p in dpo if p["turn_id"] in first_turns]) if cfg.task_family == "backend"
               else {})}


def first_turn_asking(first_pairs: list[dict]) -> dict:
    """What the first-turn DPO pairs teach about asking: pairs whose chosen action is a question minus pairs whose
    rejected one is. A reading, not a predictor: its sign matched the actor's asking in laptop runs P, O, Q and R
    (+5, +5, -3, -5), not in run T (+5, an actor that never asks; README, *Run T*).
    """
    from sweet.colbench.backend import message_kind

    asks = sum((message_kind(p["chosen"]) == "question") - (message_kind(p["rejected"]) == "question")
               for p in first_pairs)
    return {"first_turn_dpo_pairs": len(first_pairs), "first_turn_question_net": asks}
