"""`sweet eval-frontend`: score HTML answers against frontend tasks, one JSON line per answer.

Task rows need `ground_truth` (the reference page); a row without `task_id` gets its 0-based row index as id.
Answer rows are `{"task_id": ..., "answer": "<html>"}`. Each answer and each reference is rendered offline in one
pooled browser; the similarity of the two screenshots is printed with the metric's name, in the answers' order.
A page that cannot be rendered is scored as a black image (as the official evaluation does) and says why in `error`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from sweet.colbench.eval_cli import read_answers
from sweet.store import iter_jsonl


def read_pages(path: Path) -> dict[str, str]:
    pages = {}
    for row, rec in iter_jsonl(path):
        page = rec.get("ground_truth")
        if not isinstance(page, str) or not page.strip():
            raise ValueError(f"{path}: row {row}: field 'ground_truth' must be a non-empty HTML string")
        tid = str(rec.get("task_id", row))
        if tid in pages:
            raise ValueError(f"{path}: row {row}: duplicate task_id {tid!r}")
        pages[tid] = page
    if not pages:
        raise ValueError(f"{path}: no tasks")
    return pages


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]


def eval_frontend(tasks_path: str, answers_path: str, screenshots: str | None = None, similarity: str = "pixel",
                  timeout_s: float = 10.0, pool_size: int = 4, javascript: bool = False, out=None) -> int:
    out = out or sys.stdout  # looked up per call: a default bound at import time outlives a redirected stdout
    from sweet.render import Renderer
    from sweet.colbench.similarity import make_similarity

    tasks = read_pages(Path(tasks_path))
    answers = read_answers(Path(answers_path), tasks, what="<html>")
    sim = make_similarity(similarity)
    ref_ids = sorted({tid for tid, _ in answers})
    with Renderer(pool_size=pool_size, timeout_s=timeout_s, javascript=javascript, blank_on_failure=False) as r:
        results = r.render_many([tasks[t] for t in ref_ids] + [a for _, a in answers])
    refs = dict(zip(ref_ids, results[:len(ref_ids)]))
    shots = Path(screenshots) if screenshots else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
        for tid, res in refs.items():
            if res.png:
                (shots / f"reference_{_safe(tid)}.png").write_bytes(res.png)
    scores = sim.score_many([(res.png, refs[tid].png) for (tid, _), res in zip(answers, results[len(ref_ids):])])
    for i, ((tid, _), res, score) in enumerate(zip(answers, results[len(ref_ids):], scores)):
        if shots and res.png:
            (shots / f"{i:05d}_{_safe(tid)}.png").write_bytes(res.png)
        errors = [e for e in (res.error, f"clipped at {res.height}px" if res.clipped else None,
                              f"reference: {refs[tid].error}" if refs[tid].error else None) if e]
        out.write(json.dumps({"task_id": tid, "similarity": round(float(score), 6), "metric": sim.metric,
                              "error": "; ".join(errors)[:300] or None}) + "\n")
        out.flush()
    return 0
