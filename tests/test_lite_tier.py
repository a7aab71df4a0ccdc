"""The lite backend tier (`bundled:lite`): its file, its validator, and the simulator seeing its decisions."""

import copy
import json
from pathlib import Path

import pytest

from sweet.colbench import lite
from sweet.colbench.backend import Episode, simulator_system
from sweet.colbench.sources import load_tasks
from sweet.colbench.tasks import Task, bundled_path, parse_task
from tests._scripts import load_script


@pytest.fixture(scope="module")
def records():
    return lite.read_records(bundled_path("bundled:lite"))


def test_validator_passes_on_the_first_bundled_tasks(records):
    rep = lite.validate_records(records[:6], min_train=0, min_test=0, workers=2)
    assert rep.ok, rep.errors
    assert rep.n_tasks == 6 and len(rep.guess_failures) >= 12
    assert min(rep.guess_failures) >= lite.MIN_GUESS_FAIL


def test_bad_records_get_one_clear_error_each(records):
    good = records[0][1]
    passing_guess = copy.deepcopy(good) | {"task_id": "bad-guess"}
    passing_guess["guesses"][0] = good["ground_truth"].rstrip() + "  # same rule, other text\n"
    absent = copy.deepcopy(good) | {"task_id": "bad-literal"}
    absent["decisions"][0] = "The magic number is 12345.678."
    absent["decision_values"][0] = 12345.678
    missing = copy.deepcopy(good) | {"task_id": "bad-missing"}
    del missing["guesses"]
    rep = lite.validate_records([("f.jsonl: row 0", passing_guess), ("f.jsonl: row 1", absent),
                                 ("f.jsonl: row 2", missing)], min_train=0, min_test=0, workers=2)
    assert len(rep.errors) == 3, rep.errors
    by_task = {tid: [e for e in rep.errors if f"task {tid})" in e] for tid in ("bad-guess", "bad-literal", "bad-missing")}
    assert all(len(v) == 1 for v in by_task.values()), rep.errors
    assert "row 0" in by_task["bad-guess"][0] and "guess 1 fails only 0 of 10 tests" in by_task["bad-guess"][0]
    assert "12345.678" in by_task["bad-literal"][0] and "not a literal of the reference" in by_task["bad-literal"][0]
    assert "missing field 'guesses'" in by_task["bad-missing"][0]


def test_static_checks_catch_counts_and_duplicates(records):
    recs = [r for _, r in records[:2]]
    dup = copy.deepcopy(recs[0])  # same id, same description
    rep = lite.validate_records([("a", recs[0]), ("b", dup)], min_train=5, min_test=0, workers=1)
    text = "\n".join(rep.errors)
    assert "duplicate task_id" in text and "near-duplicate descriptions" in text and "split counts" in text


def test_load_tasks_gives_the_tier_with_decisions():
    tasks = load_tasks("bundled:lite")
    train = [t for t in tasks if t.split == "train"]
    test = [t for t in tasks if t.split == "test"]
    assert len(train) >= 100 and len(test) >= 50
    assert all(1 <= len(t.decisions) <= 2 and all(isinstance(d, str) for d in t.decisions) for t in tasks)
    assert all(not t.decisions for t in load_tasks("bundled"))  # the other sets have none
    row = tasks[0].to_row()
    assert row["decisions"] == tasks[0].decisions and Task(**row) == tasks[0]


def test_parse_task_rejects_bad_decisions():
    rec = {"task_id": "x", "split": "train", "problem_description": "d", "ground_truth": "def f(): return 1",
           "test_cases": ["f()"], "decisions": "Late fees are $0.25 per day."}
    with pytest.raises(ValueError, match=r"f\.jsonl: row 7: field 'decisions' must be a list"):
        parse_task(Path("f.jsonl"), 7, rec, None)
    assert parse_task(Path("f.jsonl"), 7, rec | {"decisions": ["a", "b"]}, None).decisions == ["a", "b"]
    assert parse_task(Path("f.jsonl"), 7, {k: v for k, v in rec.items() if k != "decisions"}, None).decisions == []


def test_tasks_carry_their_hidden_values_through_a_table_row():
    """The lite tier's `decision_values` ride on the task (JSON-encoded: a table column holds one type) so the report
    can count the hidden values a final answer states; a bool, a list or a dict is not a value."""
    rec = {"task_id": "x", "split": "train", "problem_description": "d", "ground_truth": "def f(): return 1",
           "test_cases": ["f()"], "decisions": ["Fees are $0.25 a day.", "Names are joined with '-'."]}
    t = parse_task(Path("f.jsonl"), 3, rec | {"decision_values": [0.25, "-"]}, None)
    assert t.values() == [0.25, "-"] and Task(**t.to_row()).values() == [0.25, "-"]
    lite_task = next(t for t in load_tasks("bundled:lite") if t.split == "train")
    assert lite_task.values() and all(isinstance(v, (int, float, str)) for v in lite_task.values())
    for bad in ([True], [[1]], "0.25"):
        with pytest.raises(ValueError, match=r"f\.jsonl: row 3: field 'decision_values' must be a list of numbers"):
            parse_task(Path("f.jsonl"), 3, rec | {"decision_values": bad}, None)
    assert lite.values_stated("RATE = 0.25\nSEP = '-'", t.values()) == 1.0
    assert lite.values_stated("RATE = 0.5", t.values()) == 0.0 and lite.values_stated("x", []) is None


# The simulator's system prompt before the lite tier, verbatim: tasks without decisions must still get exactly this.
OLD_SIM_SYSTEM = (
    "You are the user who asked an agent for a Python function. Your hidden code below is exactly the function you "
    "want; the agent cannot see it.\n"
    "Reply to the agent's latest message in at most two short sentences of plain English, stating the concrete "
    "rules, numbers or formats from your code that answer it. Never write code. If your code does not answer the "
    "question, say \"I don't know\".\n\n"
    "Task given to the agent:\n{problem}\n\nYour hidden code:\n{code}"
)


def test_simulator_prompt_lists_decisions_only_for_tasks_that_have_them():
    plain = load_tasks("bundled")[0]
    e = Episode(plain, 0, max_turns=3)
    e.messages.append({"role": "assistant", "content": "What is the rate?"})
    view = e.simulator_view()
    assert view[0]["content"] == OLD_SIM_SYSTEM.format(problem=plain.problem_description, code=plain.ground_truth)
    assert view[1:] == [{"role": "user", "content": "What is the rate?"}]

    task = next(t for t in load_tasks("bundled:lite") if len(t.decisions) == 2)
    sys_text = Episode(task, 0, max_turns=3).simulator_view()[0]["content"]
    assert sys_text == simulator_system(task)
    head = OLD_SIM_SYSTEM.format(problem=task.problem_description, code=task.ground_truth)
    assert sys_text.startswith(head)
    tail = sys_text[len(head):]
    assert "What you want, in plain words" in tail
    assert all(f"- {d}" in tail for d in task.decisions)


@pytest.mark.parametrize("text,value,ok", [
    ("The fee is $0.25 per day.", 0.25, True), ("It's 25 cents a day.", 0.25, True),
    ("The discount is 15%.", 0.15, True), ("15 percent off", 0.15, True), ("A rate of 0.15.", 0.15, True),
    ("We close at 6pm.", 18, True), ("We close at 18:00.", 18, True), ("At most five stars.", 5, True),
    ("Capped at $1,200.", 1200, True), ("Below -2 degrees.", -2, True), ("Below 2 degrees.", -2, False),
    ("Overtime pays 1.5 times.", 1.75, False), ("I don't know.", 4, False),
    ("Use '_' between words.", "_", True), ("An underscore goes between words.", "_", True),
    ("Sure.", ".", False), ("Put a dot after each letter.", ".", True), ("Add ' (more)' at the end", " (more)", True),
    ("Replace them with X.", "x", False), ("Replace them with x.", "x", True), ("It says n/a.", "n/a", True),
])
def test_states_value(text, value, ok):
    assert lite.states_value(text, value) is ok


def test_generator_is_deterministic_and_the_bundled_file_is_fresh():
    mod = load_script("make_lite_tier")
    a, b = mod.build(), mod.build()
    assert a == b
    assert mod.dumps(a) == bundled_path("bundled:lite").read_text(encoding="utf-8")
    rows = [json.loads(x) for x in mod.dumps(a).splitlines()]
    assert len({r["template"] for r in rows}) >= 30 and all(r["split"] in ("train", "test") for r in rows)
