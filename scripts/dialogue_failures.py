#!/usr/bin/env python
"""Why multi-turn episodes fail: counts of the protocol's failure modes in a trajectories (or eval_results) table.

For lite-tier episodes (the tier's records state each hidden value, `decision_values`), per first agent message
kind (answer with the marker, a marker misspelt, code without the marker, a question, prose) the count and mean
reward; final answers with no body (empty, or only the `def` line); simulator replies that echo the agent's
message (similarity > 0.6 on the first 200 characters) and replies that state one of the task's hidden values;
and how many of the hidden values the final answers state (what asking is for: a right answer needs them). Several
tables are read as one; with a `method` column each method is counted apart, and `--baseline METHOD` adds, per
method, the paired difference in hidden values stated by the final answer (per task, bootstrap 95% interval).
Read-only: it loads the tables and the tier file, runs nothing the agent wrote.

    .venv/bin/python scripts/dialogue_failures.py \
        artifacts/laptop/collect_trajectories/<fingerprint>/trajectories.parquet
    .venv/bin/python scripts/dialogue_failures.py --baseline zero_shot \
        artifacts/laptop/evaluate/<zero-shot fp>/eval_results.parquet artifacts/laptop/evaluate/<sweet fp>/eval_results.parquet
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweet.colbench import lite  # noqa: E402
from sweet.colbench.backend import message_kind  # noqa: E402
from sweet.colbench.tasks import bundled_path  # noqa: E402
from sweet.stats import paired_bootstrap, per_task_mean  # noqa: E402

ECHO_SIMILARITY = 0.6
# The episode's last-turn note, whichever wording the collection used (it changed on 2026-12-01).
LAST_NOTE = re.compile(r"\n\n\(This is your last turn[^\n]*\)$")


def no_body(answer: str | None) -> bool:
    return not [ln for ln in (answer or "").splitlines() if ln.strip() and not ln.lstrip().startswith("def ")]


def chance_values(task_id: str, values: dict, k: int = 3) -> list:
    """The hidden values of the k tasks after this one in the tier (not its own): a long answer full of example
    numbers states some of them by chance, so this is the yardstick for its own."""
    ids = sorted(values)
    if task_id not in values:
        return []
    i = ids.index(task_id)
    return [v for j in range(1, k + 1) for v in values[ids[(i + j) % len(ids)]] if v not in values[task_id]]


def report(name: str, df, values: dict) -> dict[str, float]:
    """Print one group's counts; return its per-task mean share of hidden values stated by the final answer."""
    kinds, rewards = collections.Counter(), collections.defaultdict(float)
    stubs = multi = stub_multi = replies = echoes = stated = 0
    in_answer: list[dict] = []
    by_chance: list[float] = []
    for _, r in df.iterrows():
        msgs = json.loads(r["messages"])
        agent = [m["content"] for m in msgs if m["role"] == "assistant"]
        if not agent:
            continue
        k = message_kind(agent[0])
        kinds[k] += 1
        rewards[k] += float(r["reward"])
        stub = no_body(r["answer"])
        stubs += stub
        if len(agent) > 1:
            multi += 1
            stub_multi += stub
        for m, reply in zip(msgs[1:], msgs[2:]):
            if m["role"] == "assistant" and reply["role"] == "user":
                text = LAST_NOTE.sub("", reply["content"])
                replies += 1
                echoes += difflib.SequenceMatcher(None, m["content"][:200], text[:200]).ratio() > ECHO_SIMILARITY
                stated += any(lite.states_value(text, v) for v in values.get(r["task_id"], []))
        share = lite.values_stated(r["answer"], values.get(r["task_id"], []))
        if share is not None:
            in_answer.append({"task_id": r["task_id"], "share": share})
            other = lite.values_stated(r["answer"], chance_values(r["task_id"], values))
            by_chance += [] if other is None else [other]
    print(f"{name}: {len(df)} episodes")
    print("| first agent message | episodes | mean reward |\n|---|---|---|")
    for k, n in kinds.most_common():
        print(f"| {k} | {n} | {rewards[k] / n:.3f} |")
    print(f"final answers with no body (empty or only the def line): {stubs} ({stub_multi} of {multi} multi-turn)")
    print(f"simulator replies: {replies}; echoing the agent: {echoes}; stating a hidden value: {stated}")
    per_task = per_task_mean(in_answer, "share")
    if per_task:
        print(f"hidden values stated by the final answer: {100 * sum(per_task.values()) / len(per_task):.1f} % "
              f"(mean over {len(per_task)} tasks; other tasks' values, by chance: "
              f"{100 * sum(by_chance) / max(len(by_chance), 1):.1f} %)")
    return per_task


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", nargs="+", help="trajectories.parquet or eval_results.parquet tables (messages, answer, "
                    "reward, task_id; read as one)")
    ap.add_argument("--tier", default=str(bundled_path("bundled:lite")),
                    help="the lite records (default: the bundled tier)")
    ap.add_argument("--baseline", default="", help="a method of the tables' `method` column: compare every other "
                    "method's hidden values stated by the final answer with it, paired by task")
    a = ap.parse_args(argv)
    import pandas as pd

    frames = []
    for t in a.table:
        path = Path(t)
        if not path.is_file():
            print(f"dialogue_failures: {path} does not exist", file=sys.stderr)
            return 2
        df = pd.read_parquet(path)
        missing = {"task_id", "messages", "answer", "reward"} - set(df.columns)
        if missing:
            print(f"dialogue_failures: {path} has no column(s) {sorted(missing)}", file=sys.stderr)
            return 2
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    values = {rec["task_id"]: rec.get("decision_values", []) for _, rec in lite.read_records(a.tier)}
    name = ", ".join(a.table)
    if "method" not in df.columns:
        if a.baseline:
            print(f"dialogue_failures: --baseline needs a `method` column; {name} has none", file=sys.stderr)
            return 2
        report(name, df, values)
        return 0
    methods = list(dict.fromkeys(df["method"]))
    if a.baseline and a.baseline not in methods:
        print(f"dialogue_failures: no method {a.baseline!r} in {name} (it has: {', '.join(methods)})", file=sys.stderr)
        return 2
    shares = {m: report(f"{name} [{m}]", df[df["method"] == m], values) for m in methods}
    for m in methods:
        if a.baseline and m != a.baseline:
            d = paired_bootstrap(shares[m], shares[a.baseline])
            print(f"hidden values stated by the final answer, {m} - {a.baseline}: {100 * d['diff']:+.1f} "
                  f"[{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}] points ({d['n_tasks']} tasks paired)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
