#!/usr/bin/env python
"""Where does a trained critic put its credit? Eq. 2's advantage of every turn of collected trajectories.

The Bradley-Terry loss (Eq. 3) only sees each trajectory's SUM of turn advantages, so a critic may learn to rank
whole trajectories and still put all the credit on one turn (say, the final answer's code, where chosen and rejected
differ most visibly) and none on the question that earned it. The candidates stage ranks first-turn actions by
that same per-turn advantage, so such a critic never prefers asking at turn 0. This script scores every assistant
turn of a `collect_trajectories` output with a `train_critic` output and prints, on train data:

- mean turn-0 advantage by what the first message does (question, answer, code without the marker, prose);
- mean advantage by turn position (first, middle, last) and the share of |advantage| on the last turn;
- within-task correlation with the episode's reward (% tests passed) of the turn-0 and the last-turn advantage.

  .venv/bin/python scripts/turn_credit.py --trajectories artifacts/laptop/collect_trajectories/<fp>/trajectories.parquet \
      --critic artifacts/laptop/train_critic/<fp>/critic [--limit 40] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweet.colbench.backend import message_kind  # noqa: E402
from sweet.store import loads, read_rows  # noqa: E402


def episode_credit(rows: list[dict], credit) -> list[dict]:
    """Per trajectory row: {task_id, reward, kinds (per assistant turn), adv (per turn)}. `credit(messages,
    training_info)` -> per-turn advantages; rows whose turns were cut by the critic's max_length are skipped."""
    out = []
    for r in rows:
        msgs = loads(r["messages"])
        acts = [m["content"] for m in msgs if m["role"] == "assistant"]
        if not acts:
            continue
        adv = credit(msgs, r["training_info"])
        if len(adv) != len(acts):
            continue
        out.append({"task_id": r["task_id"], "reward": float(r["reward"]), "kinds": [message_kind(a) for a in acts],
                    "adv": [float(a) for a in adv]})
    return out


def _mean(xs):
    return statistics.fmean(xs) if xs else None


def _within_task_corr(eps: list[dict], pick) -> tuple[float | None, int]:
    """Pearson correlation of pick(ep) with reward after subtracting each task's means (tasks whose rewards or
    picked values do not vary add nothing); (r, episodes used)."""
    by_task = defaultdict(list)
    for e in eps:
        by_task[e["task_id"]].append((pick(e), e["reward"]))
    xs, ys = [], []
    for pts in by_task.values():
        if len(pts) < 2:
            continue
        mx, my = _mean([p[0] for p in pts]), _mean([p[1] for p in pts])
        xs += [p[0] - mx for p in pts]
        ys += [p[1] - my for p in pts]
    sxx, syy = sum(x * x for x in xs), sum(y * y for y in ys)
    if not sxx or not syy:
        return None, len(xs)
    return sum(x * y for x, y in zip(xs, ys)) / (sxx * syy) ** 0.5, len(xs)


def summarise(eps: list[dict]) -> dict:
    """The three readings of the module docstring, as a dict (None where there is no data)."""
    first = defaultdict(list)
    for e in eps:
        first[e["kinds"][0]].append(e)
    by_kind = {k: {"episodes": len(v), "turn0_adv": _mean([e["adv"][0] for e in v]),
                   "reward": _mean([e["reward"] for e in v])} for k, v in sorted(first.items())}
    multi = [e for e in eps if len(e["adv"]) > 1]
    position = {"first": _mean([e["adv"][0] for e in multi]),
                "middle": _mean([a for e in multi for a in e["adv"][1:-1]]),
                "last": _mean([e["adv"][-1] for e in multi])}
    total = sum(abs(a) for e in multi for a in e["adv"])
    last_share = sum(abs(e["adv"][-1]) for e in multi) / total if total else None
    r0, n0 = _within_task_corr(eps, lambda e: e["adv"][0])
    rl, _ = _within_task_corr(eps, lambda e: e["adv"][-1])
    rs, _ = _within_task_corr(eps, lambda e: sum(e["adv"]))
    return {"episodes": len(eps), "first_message": by_kind, "by_position": position,
            "last_turn_share_of_abs_adv": last_share, "multi_turn_episodes": len(multi),
            "within_task_corr_with_reward": {"turn0": r0, "last": rl, "sum": rs, "episodes": n0}}


def _fmt(x, d=3):
    return "—" if x is None else f"{x:+.{d}f}"


def render(s: dict) -> str:
    lines = [f"{s['episodes']} episodes scored ({s['multi_turn_episodes']} with more than one turn)", "",
             "| first message | episodes | mean reward | mean turn-0 advantage |", "|---|---|---|---|"]
    for k, v in s["first_message"].items():
        lines.append(f"| {k} | {v['episodes']} | {v['reward']:.3f} | {_fmt(v['turn0_adv'])} |")
    p, c = s["by_position"], s["within_task_corr_with_reward"]
    share = s["last_turn_share_of_abs_adv"]
    lines += ["", f"mean advantage by position (multi-turn episodes): first {_fmt(p['first'])}, "
                  f"middle {_fmt(p['middle'])}, last {_fmt(p['last'])}; last turn's share of |advantage|: "
                  f"{'—' if share is None else f'{share:.2f}'}",
              f"within-task correlation with reward ({c['episodes']} episodes): turn 0 {_fmt(c['turn0'], 2)}, "
              f"last turn {_fmt(c['last'], 2)}, sum over turns {_fmt(c['sum'], 2)}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trajectories", required=True, type=Path, help="a collect_trajectories trajectories.parquet")
    ap.add_argument("--critic", required=True, type=Path, help="a train_critic output's critic/ folder (LM head)")
    ap.add_argument("--limit", type=int, default=None, help="score only the first N trajectories")
    ap.add_argument("--json", type=Path, default=None, help="also write the per-episode advantages and summary here")
    args = ap.parse_args(argv)
    for p in (args.trajectories, args.critic):
        if not p.exists():
            ap.error(f"{p} does not exist")
    from tqdm import tqdm

    from sweet.algos.critic import turn_credit
    from sweet.algos.scoring import load_any_critic
    critic = load_any_critic(args.critic, "cpu")
    if critic.kind != "lm":
        ap.error(f"{args.critic}: a {critic.kind!r} critic has no per-turn advantage; expects an LM-head critic")
    rows = read_rows(args.trajectories)[:args.limit]
    eps = episode_credit(tqdm(rows, desc="scoring turns", unit="episode"),
                         lambda m, c: turn_credit(critic.model, critic.tokenizer, m, c, critic.config))
    summary = summarise(eps)
    print(render(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "episodes": eps}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
