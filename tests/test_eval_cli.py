import json

from sweet.cli import main


def test_eval_backend_prints_one_line_per_answer_in_order(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"ground_truth": "def f(x):\n    return x * 2", "test_cases": {"a": "f(1)", "b": "f(-3)"}})
                     + "\n" + json.dumps({"task_id": "t", "ground_truth": "def g():\n    return (1, 2)", "test_cases": ["g()"]}) + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join(json.dumps(r) for r in [
        {"task_id": "t", "answer": "def g():\n    return [1, 2]"},
        {"task_id": 0, "answer": "```python\ndef f(x):\n    return x + x\n```"},
        {"task_id": "0", "answer": "def f(x):\n    while True: pass"},
    ]) + "\n")
    assert main(["eval-backend", "--tasks", str(tasks), "--answers", str(answers), "--timeout", "0.5"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["task_id"] for r in rows] == ["t", "0", "0"]
    assert rows[0]["tests_passed"] == 0 and rows[0]["success"] is False  # a list is not a tuple
    assert rows[1] == {"task_id": "0", "tests_passed": 2, "tests_total": 2, "reward": 1.0, "success": True, "error": None,
                       "scoring": "strict"}
    assert rows[2]["reward"] == 0.0


def test_eval_backend_bad_row_names_file_and_row(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"ground_truth": "def f(): return 1", "test_cases": ["f()"]}) + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"task_id": 0, "answer": "x"}\n{"task_id": 0}\n')
    assert main(["eval-backend", "--tasks", str(tasks), "--answers", str(answers)]) == 2
    assert "answers.jsonl: row 1" in capsys.readouterr().err
    answers.write_text('{"task_id": 5, "answer": "x"}\n')
    assert main(["eval-backend", "--tasks", str(tasks), "--answers", str(answers)]) == 2
    assert "task_id '5' is not in the tasks file" in capsys.readouterr().err
