#!/usr/bin/env python
"""How often the human simulator gives away a lite task's hidden value when asked about it.

For N tasks of the lite tier (`bundled:lite`), each hidden decision gets one scripted question (the record's
`questions`); the simulator answers it exactly as in an episode (`Episode.simulator_view`: the task, the hidden code,
the question as the agent's first message; greedy decoding; the reply cut like a real one). A reply is correct when
it states the decision's value (`sweet.colbench.lite.states_value`: '$0.25', '25 cents', '15%' / '0.15', '6pm',
number words, quoted strings...) and holds no code. Both conditions are measured on the same questions: the prompt
as it is (the plain-words decisions listed beside the code) and without the decisions (code only, the prompt every
other task gets). `--view` picks how the dialogue is laid out (`backend.simulator_view`: chat turns, or one
transcript message as the released environment); the default is the profile's.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/simulator_accuracy.py --n 40
    OMP_NUM_THREADS=2 .venv/bin/python scripts/simulator_accuracy.py --n 40 --profile laptop --view transcript

The simulator is `models.simulator` of the profile (tiny: Qwen2.5-Coder-0.5B-Instruct, converted into
artifacts/models on first use). Replies go to --out as JSONL.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_queries(records: list[dict], tasks: dict, view: str = "chat") -> list[dict]:
    """One query per (task, decision): the question, the value it should get, and both simulator views (laid out
    as `view`)."""
    from sweet.colbench.backend import Episode

    out = []
    for rec in records:
        task = tasks[rec["task_id"]]
        for i, (q, v) in enumerate(zip(rec["questions"], rec["decision_values"])):
            views = {}
            for cond, t in (("with_decisions", task), ("code_only", dataclasses.replace(task, decisions=[]))):
                e = Episode(t, 0, max_turns=2, sim_view=view)
                e.messages.append({"role": "assistant", "content": q})
                views[cond] = e.simulator_view()
            out.append({"task_id": rec["task_id"], "template": rec.get("template", ""), "decision": i,
                        "question": q, "value": v, "views": views})
    return out


def judge(reply: str, value) -> bool:
    from sweet.colbench.lite import looks_like_code, states_value
    return not looks_like_code(reply) and states_value(reply, value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="tasks (the first N of the split, by task_id)")
    ap.add_argument("--split", default="train", choices=("train", "test"))
    ap.add_argument("--profile", default="tiny", help="config profile giving the simulator model")
    ap.add_argument("--batch", type=int, default=16, help="conversations per generate call (default %(default)s)")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="reply tokens (default: the profile's collect.sim_max_new_tokens)")
    ap.add_argument("--conditions", default="with_decisions,code_only",
                    help="comma list of with_decisions, code_only")
    ap.add_argument("--view", choices=("chat", "transcript"), default=None,
                    help="how the simulator sees the dialogue (default: the profile's backend.simulator_view)")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "lite" / "simulator_accuracy.jsonl")
    a = ap.parse_args(argv)

    from sweet.agents import load_chat
    from sweet.colbench.backend import clean_reply
    from sweet.colbench.lite import read_records
    from sweet.colbench.sources import load_tasks
    from sweet.colbench.tasks import bundled_path
    from sweet.config import load_config

    cfg = load_config(a.profile)
    records = sorted((r for _, r in read_records(bundled_path("bundled:lite")) if r["split"] == a.split),
                     key=lambda r: r["task_id"])[:a.n]
    tasks = {t.task_id: t for t in load_tasks("bundled:lite")}
    view = a.view or cfg.backend.simulator_view
    queries = build_queries(records, tasks, view)
    conds = [c for c in a.conditions.split(",") if c]
    max_new = a.max_new_tokens or cfg.collect.sim_max_new_tokens
    print(f"{len(records)} {a.split} tasks, {len(queries)} questions, simulator {cfg.models.simulator}, "
          f"{max_new} tokens, greedy, {view} view", flush=True)
    t0 = time.monotonic()
    sim = load_chat(cfg.models.simulator, cfg, batch=a.batch)
    t_load = time.monotonic() - t0
    results: dict[str, list[bool]] = {}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", encoding="utf-8") as f:
        for cond in conds:
            t1 = time.monotonic()
            replies = sim.generate([q["views"][cond] for q in queries], max_new, 0.0)
            oks = []
            for q, r in zip(queries, replies):
                r = clean_reply(r if isinstance(r, str) else "")
                ok = judge(r, q["value"])
                oks.append(ok)
                f.write(json.dumps({"condition": cond, "task_id": q["task_id"], "template": q["template"],
                                    "question": q["question"], "value": q["value"], "reply": r, "correct": ok},
                                   ensure_ascii=False) + "\n")
            results[cond] = oks
            print(f"{cond}: {sum(oks)}/{len(oks)} correct ({100 * sum(oks) / len(oks):.1f}%) "
                  f"in {time.monotonic() - t1:.0f} s", flush=True)
    print(f"model load {t_load:.0f} s, total {time.monotonic() - t0:.0f} s; replies in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
