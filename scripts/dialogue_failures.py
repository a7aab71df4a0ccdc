#!/usr/bin/env python
"""Why multi-turn episodes fail: counts of the protocol's failure modes in a trajectories (or eval_results) table.

For lite-tier episodes (the tier's records state each hidden value, `decision_values`), per first agent message
kind (answer with the marker, a marker misspelt, code without the marker, a question, prose) the count and mean
reward; final answers with no body (empty, or only the `def` line); simulator replies that echo the agent's
message (similarity > 0.6 on the first 200 characters) and replies that state one of the task's hidden values.
Read-only: it loads the table and the tier file, runs nothing the agent wrote.

    .venv/bin/python scripts/dialogue_failures.py \
        artifacts/laptop/collect_trajectories/<fingerprint>/trajectories.parquet
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
from sweet.colbench.backend import ANSWER_MARK  # noqa: E402
from sweet.colbench.tasks import bundled_path  # noqa: E402

ECHO_SIMILARITY = 0.6
# The episode's last-turn note, whichever wording the collection used (it changed on 2026-12-01).
LAST_NOTE = re.compile(r"\n\n\(This is your last turn[^\n]*\)$")


def first_kind(text: str) -> str:
    if ANSWER_MARK in text:
        return "answer (marker)"
    if re.search(r"want to answer", text, re.I):
        return "marker misspelt"
    if "def " in text or "```" in text:
        return "code, no marker"
    return "question" if "?" in text else "prose"


def no_body(answer: str | None) -> bool:
    return not [ln for ln in (answer or "").splitlines() if ln.strip() and not ln.lstrip().startswith("def ")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", help="a trajectories.parquet or eval_results.parquet with messages, answer, reward")
    ap.add_argument("--tier", default=str(bundled_path("bundled:lite")),
                    help="the lite records (default: the bundled tier)")
    a = ap.parse_args(argv)
    import pandas as pd

    path = Path(a.table)
    if not path.is_file():
        print(f"dialogue_failures: {path} does not exist", file=sys.stderr)
        return 2
    df = pd.read_parquet(path)
    missing = {"task_id", "messages", "answer", "reward"} - set(df.columns)
    if missing:
        print(f"dialogue_failures: {path} has no column(s) {sorted(missing)}", file=sys.stderr)
        return 2
    values = {rec["task_id"]: rec.get("decision_values", []) for _, rec in lite.read_records(a.tier)}
    kinds, rewards = collections.Counter(), collections.defaultdict(float)
    stubs = multi = stub_multi = replies = echoes = stated = 0
    for _, r in df.iterrows():
        msgs = json.loads(r["messages"])
        agent = [m["content"] for m in msgs if m["role"] == "assistant"]
        if not agent:
            continue
        k = first_kind(agent[0])
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
    print(f"{path}: {len(df)} episodes")
    print("| first agent message | episodes | mean reward |\n|---|---|---|")
    for k, n in kinds.most_common():
        print(f"| {k} | {n} | {rewards[k] / n:.3f} |")
    print(f"final answers with no body (empty or only the def line): {stubs} ({stub_multi} of {multi} multi-turn)")
    print(f"simulator replies: {replies}; echoing the agent: {echoes}; stating a hidden value: {stated}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
