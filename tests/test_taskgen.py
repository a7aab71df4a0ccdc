"""LLM task generation (sweet/colbench/taskgen.py) with a fake generator and canned outputs.

References are executed only in sandbox children (through taskgen.validate / the sandbox), never in this process.
"""
import hashlib
import json

import pytest

from sweet.colbench import taskgen as tg
from sweet.sandbox import evaluate_answer
from sweet.colbench.tasks import Task
from sweet.colbench.sources import load_tasks

SIG = "The signature of the function is: "

GOOD = """<reference>
def gym_fee(plan, months, student):
    base = {'basic': 25.0, 'plus': 40.0}.get(plan)
    if base is None:
        return None
    total = base * months
    if months >= 12:
        total *= 0.85
    if student:
        total -= 5 * months
    return round(max(total, 0.0), 2)
</reference>
<description>
I run a small gym and want a function that tells a new member what they pay for their membership, given the plan \
they picked, how many months they sign up for and whether they are a student. Long sign-ups and students get a \
better deal.

The signature of the function is: def gym_fee(plan, months, student)
</description>
<tests>
gym_fee('basic', 1, False)
gym_fee('basic', 12, False)
gym_fee('plus', 6, True)
gym_fee('plus', 12, True)
gym_fee('gold', 3, False)
gym_fee('basic', 0, False)
gym_fee('plus', 24, False)
gym_fee('basic', 11, True)
gym_fee('plus', 1, True)
gym_fee('basic', 13, True)
</tests>"""

# Prose around the answer, a fenced reference, numbered tests with comments/claimed values, 12 calls (1 repeated).
FENCED = """Sure! Here is a task for the scenario.

<reference>
```python
def quiz_score(answers, key):
    score = 0.0
    for given, right in zip(answers, key):
        if given == right:
            score += 1
        elif given and given[0] == right[0]:
            score += 0.5
    return round(100 * score / len(key), 2) if key else 0.0

print(quiz_score(['a'], ['a']))
```
</reference>

<description>
```
I am a teacher and I want to grade short quizzes automatically. Students should get some credit when they are \
close to the right answer. Give me the result as a percentage.
```
Function signature: `def quiz_score(answers, key)`
</description>

<tests>
Here are the tests:
1. quiz_score(['a', 'b'], ['a', 'b'])  # all right
2. quiz_score(['a', 'c'], ['a', 'b'])
3. quiz_score(['ab', 'bc'], ['ac', 'bd'])
4. quiz_score([], [])
5. quiz_score(['x'], ['y']) == 0.0
6. quiz_score(['a', 'b'], ['a', 'b'])
7. quiz_score(['', 'b'], ['a', 'b'])
8. quiz_score(['a'], ['a', 'b', 'c'])
9. quiz_score(['cat', 'dog', 'cow'], ['car', 'dog', 'owl'])
10. quiz_score(['a', 'b', 'c', 'd'], ['d', 'c', 'b', 'a'])
11. quiz_score(['bb'], ['ba'])
12. quiz_score(['q'], ['q'])
13. quiz_score(['z'], ['q'])
</tests>
Let me know if you want changes."""

RAISES = """<reference>
def bill_split(total, people, tip_percent):
    share = total * (1 + tip_percent / 100) / people
    return round(share, 2)
</reference>
<description>
Me and my friends eat out a lot and I want to know how much each of us pays, tip included, when we split the \
bill evenly between everybody at the table.

The signature of the function is: def bill_split(total, people, tip_percent)
</description>
<tests>
""" + "\n".join(f"bill_split({t}, {p}, 10)" for t, p in
                [(100, 4), (50, 2), (80, 0), (10, 3), (33, 1), (0, 5), (120, 6), (99, 9), (15, 2), (70, 7)]) + \
    "\n</tests>"

THREE_TESTS = GOOD.split("<tests>")[0] + "<tests>\ngym_fee('basic', 1, False)\ngym_fee('plus', 2, True)\n" \
                                         "gym_fee('gold', 3, False)\n</tests>"
SYNTAX = GOOD.replace("    if base is None:", "    if base is None")
# The good task reworded a little with one renamed variable: a near duplicate.
NEAR_DUP = GOOD.replace("I run a small gym", "I own a little gym").replace("total", "amount")
IDENTICAL = GOOD.replace("    base = {'basic'", "    return 1\n    base = {'basic'")


class Failure(str):
    """Stands in for sweet's GenerationFailure: a str equal to "" with a .reason."""

    def __new__(cls, reason):
        obj = super().__new__(cls, "")
        obj.reason = reason
        return obj


class FakeLLM:
    """Stands for an LLM endpoint (a local HF model wrapper or an OpenAI-compatible client): returns canned texts
    in order, one per conversation, and records what it was asked."""

    def __init__(self, texts):
        self.texts, self.calls = list(texts), []

    def generate(self, conversations, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        self.calls.append({"n": len(conversations), "seed": seed, "temperature": temperature,
                           "prompts": [c[-1]["content"] for c in conversations]})
        out, self.texts = self.texts[:len(conversations)], self.texts[len(conversations):]
        return out + [Failure("no more canned texts")] * (len(conversations) - len(out))


def _parse(text):
    cand, why = tg.parse_generation(text)
    assert (cand is None) == (why is not None)
    return cand, why


def test_parse_good():
    cand, _ = _parse(GOOD)
    assert cand["name"] == "gym_fee"
    assert cand["problem_description"].endswith(f"\n\n{SIG}def gym_fee(plan, months, student)")
    assert cand["problem_description"].startswith("I run a small gym")
    assert cand["ground_truth"].startswith("def gym_fee(plan, months, student):")
    assert len(cand["test_cases"]) == 10 and cand["test_cases"][0] == "gym_fee('basic', 1, False)"
    # a truncated answer (no closing tag) still parses; defaults/annotations in the signature are fine
    assert _parse(GOOD.removesuffix("</tests>"))[0] == cand
    assert _parse("<think>I could write <reference>x</reference> ...</think>\n" + GOOD)[0] == cand
    typed = GOOD.replace("(plan, months, student)", "(plan: str, months=1, student=False)")
    assert _parse(typed)[0]["problem_description"].endswith("def gym_fee(plan: str, months=1, student=False)")


def test_parse_prose_wrapped_and_fenced():
    cand, _ = _parse(FENCED)
    assert cand["name"] == "quiz_score"
    assert cand["problem_description"].endswith(
        "Give me the result as a percentage.\n\n" + SIG + "def quiz_score(answers, key)")
    assert "```" not in cand["problem_description"] and "Function signature" not in cand["problem_description"]
    assert "print(" not in cand["ground_truth"] and "```" not in cand["ground_truth"]
    tests = cand["test_cases"]
    assert len(tests) == len(set(tests)) == 10  # the repeated call counted once, the first 10 kept
    assert tests[0] == "quiz_score(['a', 'b'], ['a', 'b'])"  # numbering and comment dropped
    assert tests[4] == "quiz_score(['x'], ['y'])"  # the claimed value dropped
    assert tests[-1] == "quiz_score(['bb'], ['ba'])"  # calls 12 and 13 are beyond the first 10


@pytest.mark.parametrize("text, reason", [
    ("", "generation failed: empty output"),
    (Failure("HTTP 500"), "generation failed: HTTP 500"),
    ("Sorry, I cannot help with that.", "missing section: reference, description, tests"),
    (GOOD.split("<tests>")[0], "missing section: tests"),
    (THREE_TESTS, "too few tests: 3 distinct calls"),
    (SYNTAX, "reference syntax error"),
    (GOOD.replace("The signature of the function is: def gym_fee(plan, months, student)", ""), "no signature"),
    (GOOD.replace("def gym_fee(plan, months, student)\n</desc", "def gym_cost(plan, months, student)\n</desc"),
     "reference mismatch: the code does not define gym_cost()"),
    (GOOD.replace("(plan, months, student)\n</desc", "(plan, months)\n</desc"), "reference mismatch: the signature"),
    (GOOD.replace("(plan, months, student)\n</desc", "(plan, student, months)\n</desc"), "reference mismatch"),
    (GOOD.replace("gym_fee('gold', 3, False)", "other('gold', 3, False)"), "bad test call: does not call gym_fee()"),
    (GOOD.replace("gym_fee('gold', 3, False)", "gym_fee(PLAN, 3, False)"), "bad test call: non-literal"),
    (GOOD.replace("gym_fee('gold', 3, False)", "gym_fee('gold', 3,, False)"), "bad test call: cannot parse"),
    (GOOD.replace("Long sign-ups", "    return round(max(total, 0.0), 2)\nLong sign-ups"), "code in description"),
    (GOOD.replace(GOOD[GOOD.index("I run"):GOOD.index("The signature")], "A gym fee.\n\n"), "short description"),
])
def test_parse_rejects_with_reason(text, reason):
    cand, why = _parse(text)
    assert cand is None and why.startswith(reason), why


def _cand(text):
    return _parse(text)[0]


def test_validate_in_sandbox():
    nonplain = GOOD.replace("    base = {'basic'", "    return object()\n    base = {'basic'")
    random_ref = GOOD.replace("    base = {'basic'", "    import random\n    return random.random()\n"
                                                     "    base = {'basic'")
    cands = [_cand(GOOD), _cand(RAISES), _cand(IDENTICAL), _cand(nonplain), _cand(random_ref), _cand(FENCED)]
    res = tg.validate(cands, workers=2)
    assert [c for c, _, _ in res] == cands
    assert [ok for _, ok, _ in res] == [True, False, False, False, False, True]
    assert res[1][2].startswith("reference fails: bill_split(80, 0, 10) -> ZeroDivisionError")
    assert res[2][2] == "uninformative tests: all outputs identical"
    assert res[3][2].startswith("non-plain output")
    assert res[4][2].startswith("non-deterministic")
    none_ref = GOOD.replace("    base = {'basic'", "    return None if months else None\n    base = {'basic'")
    assert tg.validate([_cand(none_ref)])[0][1:] == (False, "uninformative tests: all outputs identical")
    two = GOOD.replace("    base = {'basic'", "    return months > 6\n    base = {'basic'")
    assert tg.validate([_cand(two)])[0][1] is True
    assert tg.validate([_cand(two)], min_distinct=3)[0][1:] == (False, "uninformative tests: only 2 distinct outputs")


def test_generated_task_is_self_consistent():
    cand = _cand(GOOD)
    report = evaluate_answer(cand["ground_truth"], cand["ground_truth"], cand["test_cases"])
    assert report.success and report.total == 10


def test_near_duplicates_among_generated_and_against_existing():
    good, dup, other = _cand(GOOD), _cand(NEAR_DUP), _cand(FENCED)
    assert tg.similarity(good, dup) >= tg.DUP_THRESHOLD > tg.similarity(good, other)
    kept, dropped = tg.near_duplicates([good, dup, other])
    assert kept == [good, other]
    assert dropped[0][0] is dup and dropped[0][1].startswith("near duplicate: of candidate-0")

    bundled = load_tasks()
    copy = {"problem_description": "Postage for my web shop from weight, zone and an express flag, please.\n\n"
                                   + SIG + "def shipping_cost(weight_kg, destination, express)",
            "ground_truth": bundled[0].ground_truth}  # same hidden code, new wording: still a duplicate
    kept, dropped = tg.near_duplicates([copy, good], existing=bundled)
    assert kept == [good] and dropped[0][1].startswith(f"near duplicate: of {bundled[0].task_id}")
    # the bundled tasks themselves are far apart under the default threshold
    assert tg.near_duplicates(bundled)[1] == []
    assert tg.near_duplicates([good, dup], threshold=1.01)[1] == []


def _run(texts, n_tasks, **kw):
    llm = FakeLLM(texts)
    kw = {"batch_size": 4, "progress": False, **kw}
    tasks, stats = tg.generate_tasks(llm, ["seed A", "seed B", "seed C"], n_tasks, **kw)
    return llm, tasks, stats


def test_generate_tasks_end_to_end():
    texts = [GOOD, RAISES, THREE_TESTS, Failure("timeout"), SYNTAX, NEAR_DUP, "", FENCED]
    llm, tasks, stats = _run(texts, 5, test_every=2, max_attempts=8, temperature=0.7, seed=3)
    assert [t.ground_truth.split("(")[0] for t in tasks] == ["def gym_fee", "def quiz_score"]
    assert all(isinstance(t, Task) for t in tasks)
    for t in tasks:
        assert t.task_id == "gen-" + hashlib.sha1(t.problem_description.encode()).hexdigest()[:10]
        assert len(t.test_cases) == 10
    assert [t.split for t in tasks] == ["train", "test"]
    assert stats == {"generated": 8, "failures": 2, "parsed": 4, "valid": 2, "duplicates": 1, "accepted": 2,
                     "reasons": {"generation failed": 2, "reference fails": 1, "too few tests": 1,
                                 "reference syntax error": 1, "near duplicate": 1}}
    # two batches of 4, seeds cycled in order, the generator seed advanced per batch
    assert [c["n"] for c in llm.calls] == [4, 4] and [c["seed"] for c in llm.calls] == [3, 4]
    assert {c["temperature"] for c in llm.calls} == {0.7}
    firsts = [p.split("Scenario: ")[1].split("\n")[0] for c in llm.calls for p in c["prompts"]]
    assert firsts == ["seed A", "seed B", "seed C"] * 2 + ["seed A", "seed B"]
    # deterministic: the same outputs give the same tasks
    assert _run(texts, 5, test_every=2, max_attempts=8, temperature=0.7, seed=3)[1] == tasks


def test_generate_stops_at_n_tasks_and_skips_existing():
    llm, tasks, stats = _run([RAISES, GOOD, FENCED, GOOD] + [GOOD] * 20, 1)
    assert len(tasks) == 1 and len(llm.calls) == 1 and stats["generated"] == 4
    assert stats["reasons"]["surplus"] == 1 and stats["duplicates"] == 1  # the second GOOD is caught pre-sandbox
    # a task already in `existing` (e.g. a previous run's output) is never produced again
    llm, again, stats = _run([GOOD, NEAR_DUP], 2, existing=tasks, max_attempts=2)
    assert again == [] and stats["duplicates"] == 2 and stats["generated"] == 2


def test_copy_of_prompt_example_is_a_duplicate():
    prompt = tg.build_prompt("anything")[0]["content"]
    example = prompt[prompt.index("<reference>"):prompt.index("</tests>") + len("</tests>")]
    assert _cand(example)["name"] == "parking_fee"  # the example itself follows the format
    _, tasks, stats = _run([example], 1, max_attempts=1)
    assert tasks == [] and stats["reasons"] == {"near duplicate": 1}


def test_bundled_seeds_load(tmp_path):
    seeds = tg.load_seeds()
    assert len(seeds) >= 40 and len(set(seeds)) == len(seeds) and all(s.strip() == s and s for s in seeds)
    bad = tmp_path / "seeds.jsonl"
    bad.write_text(json.dumps({"seed": "ok"}) + "\n" + json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"seeds.jsonl: row 1: field 'seed'"):
        tg.load_seeds(bad)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="row 0: not valid JSON"):
        tg.load_seeds(bad)
