"""`evaluate.scoring`: 'official' reproduces the released SWEET-RL check_correctness, 'strict' stays this project's.

Every rule is pinned on small answers through the real sandbox (confined child processes), each next to what
'strict' gives on the same input, so a rule that stopped applying would show up as a difference disappearing."""

import json
import time

import pytest

from sweet import sandbox
from sweet.colbench.backend import ANSWER_MARK, Episode, rollout
from sweet.colbench.tasks import Task
from sweet.config import load_config
from sweet.pipeline import fingerprint
from sweet.stages import COLLECT, CRITIC, EVALUATE, PAIRS
from sweet.stages.report import results_table, summarize_by_method
from sweet.sandbox import _official, evaluate_answer, evaluate_many

REF = "def f(x):\n    return x * 2\n"
TESTS = [f"f({i})" for i in range(10)]


def _both(answer, reference=REF, tests=TESTS, **limits):
    return (evaluate_answer(answer, reference, tests, scoring="strict", **limits),
            evaluate_answer(answer, reference, tests, scoring="official", **limits))


def test_a_helper_function_fails_under_official_only():
    answer = "def double(x):\n    return x * 2\n\ndef f(x):\n    return double(x)\n"
    strict, official = _both(answer)
    assert strict.passed == 10 and strict.success
    assert official.passed == 0 and all(e.startswith("NameError") and "double" in e for e in official.errors)


def test_a_top_level_import_is_invisible_inside_the_function():
    top = "import math\ndef f(x):\n    return int(math.fabs(x)) * 2\n"
    inside = "def f(x):\n    import math\n    return int(math.fabs(x)) * 2\n"
    strict, official = _both(top)
    assert strict.passed == 10
    assert official.passed == 0 and "math" in official.errors[0]
    assert evaluate_answer(inside, REF, TESTS, scoring="official").passed == 10  # the import itself is fine


def test_recursion_fails_under_official():
    # f(0) returns without calling itself; every other call looks `f` up in the globals, where it is not.
    answer = "def f(x):\n    return 0 if x == 0 else f(x - 1) + 2\n"
    strict, official = _both(answer)
    assert strict.passed == 10
    assert official.passed == 1 and official.errors[0] is None and official.errors[1].startswith("NameError")


def test_the_reference_runs_the_same_way():
    ref = "def double(x):\n    return x * 2\ndef f(x):\n    return double(x)\n"
    strict, official = _both(REF, reference=ref)
    assert strict.passed == 10
    # Its calls fail (the released code turns that into None, which never passes).
    assert official.passed == 0 and all(e.startswith("reference failed: NameError") for e in official.errors)


@pytest.mark.parametrize("line", ["import os\n", "from os import path\n", "import sys\n", "from sys import maxsize\n",
                                  "# no sudo\n", "# no transformers\n", "# never exit()\n", "# never quit()\n",
                                  "# argparse is not needed\n"])
def test_a_banned_substring_scores_zero(line):
    strict, official = _both(line + REF)
    assert strict.passed == 10  # harmless code: only the text rule refuses it
    word = next(b for b in _official.BANNED if b in line)
    assert (official.passed, official.error) == (0, f"refused: contains {word!r}")


def test_banned_words_are_looked_for_in_the_raw_text_fences_are_stripped_the_released_way():
    fenced = f"Here it is:\n```python\n{REF}```\nDone."
    assert _both(fenced)[1].passed == 10
    assert _both(f"```\n{REF}```")[1].passed == 10
    # Outside the fence, but in the text: refused all the same.
    assert _both(fenced + "\nI did not import sys.")[1].error == "refused: contains 'import sys'"
    # The released split keeps a ```py block's language line (a NameError when executed); strict strips it.
    strict, official = _both(f"```py\n{REF}```")
    assert strict.passed == 10 and official.passed == 0 and "'py'" in official.errors[0]
    assert _official.strip_fences("a```python\nX```b```python\nY```") == "\nX"  # the first python block
    assert _official.strip_fences("a```js\nX```b") == "js\nX" and _official.strip_fences("no fence") == "no fence"


def test_a_none_reference_value_never_passes_under_official():
    ref = "def f(x):\n    if x % 2:\n        return None\n    return x\n"
    strict, official = _both(ref, reference=ref)
    assert strict.passed == 10  # None == None
    assert official.passed == 5
    assert official.errors[1::2] == ["reference returned None"] * 5 and official.errors[0::2] == [None] * 5


def test_an_infinite_loop_fails_its_call_after_one_second_and_the_others_count():
    answer = "def f(x):\n    if x == 3:\n        while True:\n            pass\n    return x * 2\n"
    evaluate_answer(REF, REF, TESTS, scoring="official", timeout_s=5.0)  # the reference, cached beforehand
    t = time.monotonic()
    r = evaluate_answer(answer, REF, TESTS, scoring="official", timeout_s=5.0)
    took = time.monotonic() - t
    assert r.passed == 9 and r.errors[3] == "timeout" and r.error is None
    # 1 s for the looping call whatever timeout_s says (5 s here); the rest is starting a fresh child.
    assert 0.9 <= took < 4.5, took


def test_strict_is_unchanged_and_the_default():
    answers = ["def double(x):\n    return x * 2\ndef f(x):\n    return double(x)\n", "import os\n" + REF,
               "def f(x):\n    return x * 2 if x < 4 else x\n", f"```python\n{REF}```"]
    default = evaluate_many([(a, REF, TESTS) for a in answers], workers=2)
    strict = evaluate_many([(a, REF, TESTS) for a in answers], workers=2, scoring="strict")
    official = evaluate_many([(a, REF, TESTS) for a in answers], workers=2, scoring="official")
    assert [r.passed for r in default] == [r.passed for r in strict] == [10, 10, 4, 10]
    assert [r.errors for r in default] == [r.errors for r in strict]
    assert [r.passed for r in official] == [0, 0, 4, 10]
    with pytest.raises(ValueError, match="unknown scoring"):
        evaluate_answer(REF, REF, TESTS, scoring="lenient")


def test_strict_and_official_references_are_cached_apart():
    ref = "def g(x):\n    return x\ndef f(x):\n    return g(x)\n"
    assert evaluate_answer(ref, ref, TESTS, scoring="official").passed == 0
    assert evaluate_answer(ref, ref, TESTS, scoring="strict").passed == 10
    assert evaluate_answer(ref, ref, TESTS, scoring="official").passed == 0
    assert sandbox.SCORINGS == ("strict", "official")


# ---- through the pipeline: episodes, rows, tables, profiles, fingerprints ------------------------------------------
TASK = Task("t1", "train", "Add.\n\nThe signature of the function is: def add(a, b)",
            "def add(a, b):\n    return a + b\n", [f"add({i}, 1)" for i in range(4)])


class Script:
    def __init__(self, text):
        self.text = text

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        return [self.text] * len(convs)


def test_rollouts_score_by_the_episode_scoring_and_rows_record_it():
    from dataclasses import asdict

    from sweet.records import Trajectory

    # Our protocol extracts the code; the released environment scores the raw text after the marker.
    action = f"{ANSWER_MARK}\n```python\ndef add(a, b):\n    return a + b\n```\nNo need to import sys here."
    eps = [Episode(TASK, 0, 1, scoring="strict"), Episode(TASK, 1, 1, scoring="official")]
    rollout(eps, Script(action), Script("ok"), max_new_tokens=8, sim_max_new_tokens=8, temperature=0.0)
    assert (eps[0].reward, eps[1].reward) == (1.0, 0.0)
    assert eps[1].error == "refused: contains 'import sys'"
    assert [asdict(Trajectory.of_episode(e))["scoring"] for e in eps] == ["strict", "official"]
    with pytest.raises(ValueError, match="unknown scoring"):
        Episode(TASK, 0, 1, scoring="lenient")


def test_collection_uses_the_configured_scoring(tmp_path):
    from sweet.stages.collect import pending_episodes
    from sweet.store import write_rows

    write_rows([TASK.to_row()], tmp_path / "tasks.parquet")
    for scoring in ("strict", "official"):
        cfg = load_config("micro", [f"evaluate.scoring={scoring}"])
        eps = pending_episodes(cfg, tmp_path / "out", str(tmp_path))
        assert eps and {e.scoring for e in eps} == {scoring}


def test_results_tables_print_the_scoring():
    row = {"mode": "multi_turn", "task_id": "t", "sample_idx": 0, "reward": 1.0, "success": True, "n_turns": 1,
           "answer": "x", "error": None, "metric": "tests passed"}
    rows = [row | {"method": "zero_shot", "scoring": "official"}, row | {"method": "sweet", "scoring": "official"}]
    table = results_table(summarize_by_method(rows))
    assert "| method | mode | scoring |" in table and "| zero_shot | multi_turn | official | 100.0" in table
    assert "| sweet | multi_turn | official | +0.0" in table  # the paired table too
    old = results_table(summarize_by_method([row | {"method": "zero_shot"}]))  # a row from before the setting
    assert "| zero_shot | multi_turn | strict |" in old
    mixed = summarize_by_method([rows[0], row | {"method": "zero_shot", "scoring": "strict"}])
    assert mixed["zero_shot/multi_turn"]["scoring"] == "mixed (official, strict)"


def test_profiles_scoring_defaults():
    for name in ("paper-backend", "paper"):
        assert load_config(name).evaluate.scoring == "official", name
    for name in ("tiny", "laptop", "micro"):
        assert load_config(name).evaluate.scoring == "strict", name
    assert load_config("tiny", ["evaluate.scoring=official"]).evaluate.scoring == "official"
    with pytest.raises(ValueError):
        load_config("tiny", ["evaluate.scoring=lenient"])


def test_scoring_enters_the_fingerprints_of_collect_and_evaluate_only():
    inputs = ("artifacts/x/generate_tasks/0123456789abcdef",)
    a, b = load_config("micro"), load_config("micro", ["evaluate.scoring=official"])
    for stage in (COLLECT, EVALUATE):
        assert fingerprint(stage, a, inputs) != fingerprint(stage, b, inputs), stage.name
    for stage in (PAIRS, CRITIC):
        assert fingerprint(stage, a, inputs) == fingerprint(stage, b, inputs), stage.name
    # Collected pages are not scored by tests: a frontend collection does not rerun for it.
    fa, fb = (load_config("micro", ["task_family=frontend"] + s) for s in ([], ["evaluate.scoring=official"]))
    assert fingerprint(COLLECT, fa, inputs) == fingerprint(COLLECT, fb, inputs)


def test_eval_backend_cli_takes_the_scoring(tmp_path, capsys):
    from sweet.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "t", "ground_truth": REF, "test_cases": TESTS[:3]}) + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"task_id": "t", "answer": "import os\n" + REF}) + "\n")
    argv = ["eval-backend", "--tasks", str(tasks), "--answers", str(answers), "--workers", "1"]
    assert main(argv) == 0 and main(argv + ["--scoring", "official"]) == 0
    strict, official = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (strict["reward"], strict["scoring"]) == (1.0, "strict")
    assert (official["reward"], official["scoring"]) == (0.0, "official")
