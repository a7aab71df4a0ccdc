"""results.md pairs every system with zero_shot on the same tasks (bootstrap interval over tasks) and reports how
each behaves (asks, turns, answer length); the numbers also reach the flat metrics logged to MLflow."""

from pathlib import Path
from types import SimpleNamespace

from sweet.stages.report import paired_table, results_table, summarize_by_method, write_report
from sweet.store import read_rows


def _row(method, task, sample, reward, turns, answer="def f(x):\n    return x"):
    return {"method": method, "mode": "multi_turn", "task_id": task, "sample_idx": sample, "reward": reward,
            "success": reward == 1.0, "n_turns": turns, "answer": answer, "error": None, "metric": "tests passed",
            "messages": '[{"role": "user", "content": "task"}, {"role": "assistant", "content": "answer"}]'}


def test_paired_table_and_behaviour():
    rows = []
    for i in range(8):
        for s in range(3):
            rows.append(_row("zero_shot", f"t{i}", s, 0.2 if s else 0.0, 1, answer="x" * 10))
            rows.append(_row("sweet", f"t{i}", s, 1.0 if i < 6 else 0.2, 2, answer="x" * 30))
    summaries = summarize_by_method(rows)
    sw = summaries["sweet/multi_turn"]
    # per task: zero_shot 0.133 (0, .2, .2); sweet 1.0 on 6 tasks, 0.2 on 2 -> mean diff = (6*0.867 + 2*0.067)/8
    assert abs(sw["delta_tests_passed"] - 100 * (6 * (1 - 0.4 / 3) + 2 * (0.2 - 0.4 / 3)) / 8) < 1e-9
    assert 0 < sw["delta_tests_passed_lo"] < sw["delta_tests_passed"] < sw["delta_tests_passed_hi"]
    assert sw["delta_success"] == 75.0 and sw["paired_tasks"] == 8
    assert sw["asked_rate"] == 100.0 and summaries["zero_shot/multi_turn"]["asked_rate"] == 0.0
    assert sw["answer_chars"] == 30.0 and "delta_tests_passed" not in summaries["zero_shot/multi_turn"]
    table = results_table(summaries)
    assert "| sweet | multi_turn | strict | +" in table and "| zero_shot | multi_turn | strict | (baseline) |" in table
    assert "Δ success rate vs zero_shot" in table and "| 8 | 100.0 | 2.00 | 30 |" in table


def test_without_a_baseline_row_there_is_no_paired_table():
    rows = [_row("sweet", "t0", 0, 1.0, 1)]
    assert "Δ" not in results_table(summarize_by_method(rows))


def test_hidden_values_stated_column_pairs_tasks_that_name_them(tmp_path):
    """Lite-tier tasks name their hidden values: write_report marks each episode with the share its final answer
    states, and the paired table gains that column with a paired interval; tasks without values leave it out."""
    tasks = [SimpleNamespace(task_id=f"t{i}", values=lambda i=i: [0.25 + i, "-"]) for i in range(6)]
    rows = []
    for i in range(6):
        rows.append(_row("zero_shot", f"t{i}", 0, 0.1, 1, answer="def f(x):\n    return x * 0.5"))
        told = f"def f(x):\n    return '-'.join([str(x * {0.25 + i})])" if i < 4 else "def f(x):\n    return x"
        rows.append(_row("sweet", f"t{i}", 0, 0.3, 2, answer=told))
    cfg = SimpleNamespace(frontend=SimpleNamespace(win_rate_baseline="zero_shot"))
    metrics = write_report(cfg, tmp_path, rows, None, tasks=tasks)  # no run id: nothing sent to MLflow
    table = (tmp_path / "results.md").read_text()
    stored = read_rows(tmp_path / "eval_results.parquet")
    assert sorted(r["values_stated"] for r in stored if r["method"] == "sweet") == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert abs(metrics["sweet/multi_turn/values_stated"] - 100 * 4 / 6) < 1e-9
    assert metrics["zero_shot/multi_turn/values_stated"] == 0.0
    assert abs(metrics["sweet/multi_turn/delta_values_stated"] - 100 * 4 / 6) < 1e-9
    assert "hidden values stated (%)" in table and "| 66.7 (Δ +66.7 [" in table and "| 0.0 |" in table
    assert "hidden values" not in paired_table(summarize_by_method(rows))  # rows without values: no column
