"""`sweet eval-frontend`: one JSON line per answer, in input order, hostile pages included (real Chromium)."""
from __future__ import annotations

import json

import pytest

from sweet.cli import main
from sweet import render as R
from sweet.colbench.frontend_tasks import load_frontend_tasks

OK, WHY = R.browser_available()
needs_browser = pytest.mark.skipif(not OK, reason=f"no browser: {WHY}")


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@needs_browser
def test_eval_frontend_scores_in_order_with_hostile_pages(tmp_path, capsys):
    pages = load_frontend_tasks()[:2]
    tasks = _jsonl(tmp_path / "tasks.jsonl", [{"task_id": t.task_id, "problem_description": t.problem_description,
                                               "ground_truth": t.ground_truth} for t in pages])
    a, b = pages[0].task_id, pages[1].task_id
    hostile = [
        "<html><body><img src='http://example.com/x.png'><script src='https://evil.invalid/x.js'></script>"
        "<iframe src='http://169.254.169.254/'></iframe><h1>net</h1></body></html>",
        "<html><head><meta http-equiv='refresh' content='0;url=https://example.com'></head><body>redir</body></html>",
        "<html><body>" + "<div style='height:100px'>tall</div>" * 3000 + "</body></html>",
        "<html><body onload='while(true){}'><script>while(true){}</script>loop</body></html>",
    ]
    answers = [{"task_id": a, "answer": pages[0].ground_truth}, {"task_id": b, "answer": pages[0].ground_truth}] + \
        [{"task_id": a, "answer": h} for h in hostile] + [{"task_id": b, "answer": "not html at all"}]
    shots = tmp_path / "shots"
    rc = main(["eval-frontend", "--tasks", tasks, "--answers", _jsonl(tmp_path / "answers.jsonl", answers),
               "--screenshots", str(shots), "--timeout", "20"])
    assert rc == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["task_id"] for o in out] == [x["task_id"] for x in answers]
    assert all(set(o) == {"task_id", "similarity", "metric", "error"} for o in out)
    assert {o["metric"] for o in out} == {"pixel-ssim+edges+colour-256"}  # never reported as CLIP
    assert out[0]["similarity"] > 0.99 and out[0]["error"] is None  # the reference itself
    assert out[1]["similarity"] < out[0]["similarity"]  # another page
    assert all(0.0 <= o["similarity"] <= 1.0 for o in out)
    assert out[3]["error"] == "navigation blocked: https://example.com/"  # the meta refresh went nowhere
    assert out[4]["error"].startswith("clipped at")  # the enormous page: a defined, clipped screenshot
    assert out[-1]["similarity"] < out[0]["similarity"]
    assert sorted(p.name for p in shots.iterdir())[:2] == [f"00000_{a}.png", f"00001_{b}.png"]
    assert (shots / f"reference_{a}.png").is_file()


def test_eval_frontend_bad_rows_name_file_and_row(tmp_path, capsys):
    tasks = _jsonl(tmp_path / "tasks.jsonl", [{"task_id": "x", "ground_truth": "<html><body>x</body></html>"}])
    answers = _jsonl(tmp_path / "answers.jsonl", [{"task_id": "x", "answer": "<html></html>"},
                                                  {"task_id": "nope", "answer": "<html></html>"}])
    assert main(["eval-frontend", "--tasks", tasks, "--answers", answers]) == 2
    err = capsys.readouterr()
    assert "answers.jsonl: row 1: task_id 'nope'" in err.err and err.out == ""
    bad = _jsonl(tmp_path / "bad.jsonl", [{"task_id": "y", "problem_description": "no page"}])
    assert main(["eval-frontend", "--tasks", bad, "--answers", answers]) == 2
    assert "bad.jsonl: row 0: field 'ground_truth'" in capsys.readouterr().err
