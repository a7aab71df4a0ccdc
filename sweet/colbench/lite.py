"""The `bundled:lite` backend tier: checks of its records, and how a text "states" a hidden value.

A lite record is an ordinary backend record (`problem_description`, `ground_truth`, `test_cases`, `task_id`,
`split`) plus `decisions` (each hidden value in plain words), `decision_values` (the literal of the reference each
decision names), `questions` (one scripted question per decision) and `guesses` (2-3 plausible wrong versions of the
reference). `validate_records` checks that the tier does what it is for: every reference passes its own tests, every
guess fails at least `min_guess_fail` of them (guessing cannot succeed, asking can), every decision's value is a
literal of the reference, is stated in the decision and is absent from the description; the references run in the
sandbox only (`sweet.sandbox`), never in this process. `states_value` is also how scripts/simulator_accuracy.py
decides whether a simulator reply gave the value away.
"""

from __future__ import annotations

import ast
import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REQUIRED = {"task_id": str, "split": str, "problem_description": str, "ground_truth": str,
            "test_cases": (dict, list), "decisions": list, "decision_values": list, "questions": list,
            "guesses": list}
SIG_LINE = "The signature of the function is: "
N_TESTS = 10
MIN_GUESS_FAIL = 3
MIN_TRAIN, MIN_TEST = 100, 50

# ---------------------------------------------------------------------------------------------- stating a value
_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40,
          "fifty": 50, "sixty": 60, "hundred": 100, "half": 0.5, "double": 2, "twice": 2, "triple": 3,
          "quarter": 0.25, "noon": 12, "midnight": 0}
_NUM = re.compile(r"(?<![\w.])(-|−)?\$?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?!\d)"
                  r"\s*(%|percent\b|per cent\b|cents?\b|pm\b|p\.m\.|am\b|a\.m\.)?", re.I)
_WORD_NUM = re.compile(r"\b(" + "|".join(_WORDS) + r")\b", re.I)
_PUNCT_NAMES = {".": ["dot", "period", "full stop"], "_": ["underscore"], "-": ["hyphen", "dash", "minus"],
                "/": ["slash"], "#": ["hash", "pound sign", "number sign"], "*": ["asterisk", "star"],
                "+": ["plus"], "~": ["tilde"], "?": ["question mark"], "..": ["two dots"]}


def numbers_in(text: str) -> list[float]:
    """Every number a reader could take from `text`: '$1,200.50' -> 1200.5; '15%' -> 15 and 0.15; '25 cents' ->
    0.25; '6pm' -> 18 (and 6); number words ('five', 'twice', 'half')."""
    out: list[float] = []
    for m in _NUM.finditer(text):
        v = float(m.group(2).replace(",", "") + (f".{m.group(3)}" if m.group(3) else ""))
        v = -v if m.group(1) else v
        unit = (m.group(4) or "").lower().replace(" ", "")
        out.append(v)
        if unit in ("%", "percent") or unit.startswith("cent"):
            out.append(v / 100)
        elif unit in ("pm", "p.m.") and v < 12:
            out.append(v + 12)
        elif unit in ("am", "a.m.") and v == 12:
            out.append(0.0)
    out += [float(_WORDS[w.lower()]) for w in _WORD_NUM.findall(text)]
    return out


def _same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def states_value(text: str, value, *, quoted: bool = False) -> bool:
    """Whether `text` states `value`: a number in any usual format (see `numbers_in`); a string quoted, or (unless
    `quoted`) as a word (single letters case-sensitive), or punctuation standing alone or named ('underscore')."""
    if isinstance(value, bool):
        raise TypeError("a decision value must be a number or a string, not a bool")
    if isinstance(value, (int, float)):
        return any(_same_number(v, float(value)) for v in numbers_in(text))
    v = str(value)
    if any(f"{q}{v}{q}" in text for q in ("'", '"', "`")) or repr(v) in text:
        return True
    if quoted:
        return False
    core = v.strip()
    if not core:
        return False
    if any(c.isalnum() for c in core):
        flags = 0 if len(core) == 1 else re.I
        pat = (r"(?<!\w)" if core[0].isalnum() else "") + re.escape(core) + (r"(?!\w)" if core[-1].isalnum() else "")
        return re.search(pat, text, flags) is not None
    tokens = {t.strip("'\"`“”‘’,;()") for t in text.split()}
    return core in tokens or any(re.search(rf"\b{n}\b", text, re.I) for n in _PUNCT_NAMES.get(core, []))


def values_stated(text: str | None, values: list) -> float | None:
    """Share of a task's hidden values that `text` (e.g. the final answer) states; None when the task has none. An
    agent that was told a value and carries it into its code states it; one that guessed rarely does."""
    return sum(states_value(text or "", v) for v in values) / len(values) if values else None


def looks_like_code(text: str) -> bool:
    return "```" in text or re.search(r"^\s*(def |return |import )", text, re.M) is not None


# ---------------------------------------------------------------------------------------------- checking records
@dataclass
class LiteReport:
    n_tasks: int = 0
    n_train: int = 0
    n_test: int = 0
    decisions: dict = field(default_factory=dict)  # decisions per task -> number of tasks
    guess_failures: list = field(default_factory=list)  # per guess: tests it fails
    max_similarity: float = 0.0
    errors: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        fails = sorted(self.guess_failures)
        lines = [f"tasks: {self.n_tasks} ({self.n_train} train, {self.n_test} test)",
                 "decisions per task: " + ", ".join(f"{k}: {v} tasks" for k, v in sorted(self.decisions.items()))]
        if fails:
            lines.append(f"guesses: {len(fails)}; tests failed per guess: min {fails[0]}, median "
                         f"{fails[len(fails) // 2]}, max {fails[-1]} of {N_TESTS}")
        lines.append(f"most similar pair of descriptions: jaccard {self.max_similarity:.2f}")
        lines.append(f"errors: {len(self.errors)}")
        return "\n".join(lines)


def _literals(code: str) -> list:
    """Number and string constants of the code; `-2` (a negated constant) counts as the literal -2."""
    out = []
    for n in ast.walk(ast.parse(code)):
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant) \
                and isinstance(n.operand.value, (int, float)) and not isinstance(n.operand.value, bool):
            out.append(-n.operand.value)
        elif isinstance(n, ast.Constant) and not isinstance(n.value, bool) and isinstance(n.value, (int, float, str)):
            out.append(n.value)
    return out


def _has_literal(code: str, value) -> bool:
    for c in _literals(code):
        if isinstance(value, str):
            if isinstance(c, str) and c == value:
                return True
        elif isinstance(c, (int, float)) and _same_number(float(c), float(value)):
            return True
    return False


def _signature(code: str) -> tuple[str, list[str]] | None:
    tree = ast.parse(code)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    return (fns[0].name, [a.arg for a in fns[0].args.args]) if len(fns) == 1 else None


def check_record(rec, where: str) -> list[str]:
    """Static checks of one record (no code runs); each error names `where` and the task."""
    if not isinstance(rec, dict):
        return [f"{where}: a record must be a JSON object"]
    tid = rec.get("task_id", "?")
    at = f"{where} (task {tid})"
    errs = []
    for name, kind in REQUIRED.items():
        if name not in rec:
            errs.append(f"{at}: missing field {name!r}")
        elif not isinstance(rec[name], kind):
            errs.append(f"{at}: field {name!r} has the wrong type ({type(rec[name]).__name__})")
    if errs:
        return errs
    if rec["split"] not in ("train", "test"):
        errs.append(f"{at}: field 'split' must be 'train' or 'test'")
    tests = list(rec["test_cases"].values()) if isinstance(rec["test_cases"], dict) else rec["test_cases"]
    if len(tests) != N_TESTS or len(set(tests)) != N_TESTS or not all(isinstance(t, str) for t in tests):
        errs.append(f"{at}: field 'test_cases' must hold {N_TESTS} distinct call expressions")
    code = rec["ground_truth"]
    try:
        sig = _signature(code)
    except SyntaxError as e:
        return errs + [f"{at}: ground_truth does not parse: {e}"]
    if sig is None:
        return errs + [f"{at}: ground_truth must define exactly one top-level function"]
    want = f"{SIG_LINE}def {sig[0]}({', '.join(sig[1])})"
    if not rec["problem_description"].endswith(want):
        errs.append(f"{at}: problem_description must end with {want!r}")
    desc = rec["problem_description"].removesuffix(want)
    dec, vals, qs = rec["decisions"], rec["decision_values"], rec["questions"]
    if not 1 <= len(dec) <= 2:
        errs.append(f"{at}: field 'decisions' must hold one or two decisions (got {len(dec)})")
    if not (len(dec) == len(vals) == len(qs)):
        errs.append(f"{at}: 'decisions', 'decision_values' and 'questions' must have the same length "
                    f"({len(dec)}, {len(vals)}, {len(qs)})")
    for i, (d, v) in enumerate(zip(dec, vals)):
        if not isinstance(d, str) or not d.strip():
            errs.append(f"{at}: decision {i + 1} must be a non-empty string")
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            errs.append(f"{at}: decision_values[{i}] must be a number or a string, got {v!r}")
            continue
        if not _has_literal(code, v):
            errs.append(f"{at}: decision {i + 1} ({d!r}) names {v!r}, which is not a literal of the reference code")
        if not states_value(d, v, quoted=True):
            errs.append(f"{at}: decision {i + 1} ({d!r}) does not state its value {v!r}")
        # Numbers only: a string value may be one of the options the description lists (e.g. the tax-free one
        # of the categories); which option is the decision, not the word.
        if not isinstance(v, str) and states_value(desc, v):
            errs.append(f"{at}: the description already states decision {i + 1}'s value {v!r}")
    if not all(isinstance(q, str) and q.strip() for q in qs):
        errs.append(f"{at}: every question must be a non-empty string")
    if not 2 <= len(rec["guesses"]) <= 3:
        errs.append(f"{at}: field 'guesses' must hold 2 or 3 wrong versions (got {len(rec['guesses'])})")
    for i, g in enumerate(rec["guesses"]):
        try:
            gs = _signature(g) if isinstance(g, str) else None
        except SyntaxError:
            gs = None
        if gs != sig:
            errs.append(f"{at}: guess {i + 1} must parse and define {sig[0]}({', '.join(sig[1])}) like the reference")
        elif g.strip() == code.strip():
            errs.append(f"{at}: guess {i + 1} is the reference itself")
    return errs


def _plain(v) -> bool:
    from sweet.sandbox import Unsupported
    if isinstance(v, Unsupported):
        return False
    if isinstance(v, (list, tuple, set, frozenset)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return True


def near_duplicates(recs: list[dict], threshold: float) -> tuple[list[tuple[str, str, float]], float]:
    from sweet.colbench.taskgen import shingles
    sh = [(r["task_id"], shingles(r["problem_description"])) for r in recs]
    pairs, best = [], 0.0
    for i in range(len(sh)):
        for j in range(i + 1, len(sh)):
            a, b = sh[i][1], sh[j][1]
            s = len(a & b) / len(a | b) if a | b else 1.0
            best = max(best, s)
            if s >= threshold:
                pairs.append((sh[i][0], sh[j][0], s))
    return pairs, best


def validate_records(records: list[tuple[str, dict]], *, min_train: int = MIN_TRAIN, min_test: int = MIN_TEST,
                     min_guess_fail: int = MIN_GUESS_FAIL, dup_threshold: float | None = None,
                     workers: int | None = None, timeout_s: float = 2.0) -> LiteReport:
    """All checks on (where, record) pairs; `where` (e.g. 'file.jsonl: row 3') prefixes each error."""
    from sweet.colbench.taskgen import DUP_THRESHOLD
    from sweet.sandbox import evaluate_many, run_calls

    rep = LiteReport()
    good, seen = [], {}
    for where, rec in records:
        errs = check_record(rec, where)
        rep.errors += errs
        tid = rec.get("task_id") if isinstance(rec, dict) else None
        if tid is not None:
            if tid in seen:
                rep.errors.append(f"{where}: duplicate task_id {tid!r} (first at {seen[tid]})")
            seen.setdefault(tid, where)
        if not errs:
            good.append((where, rec))
    recs = [r for _, r in good]
    rep.n_tasks = len([r for _, r in records if isinstance(r, dict)])
    rep.n_train = sum(isinstance(r, dict) and r.get("split") == "train" for _, r in records)
    rep.n_test = sum(isinstance(r, dict) and r.get("split") == "test" for _, r in records)
    for r in recs:
        rep.decisions[len(r["decisions"])] = rep.decisions.get(len(r["decisions"]), 0) + 1
    if rep.n_train < min_train or rep.n_test < min_test:
        rep.errors.append(f"split counts: {rep.n_train} train / {rep.n_test} test; need at least {min_train} / "
                          f"{min_test}")
    pairs, rep.max_similarity = near_duplicates(recs, DUP_THRESHOLD if dup_threshold is None else dup_threshold)
    rep.errors += [f"tasks {a} and {b}: near-duplicate descriptions (jaccard {s:.2f})" for a, b, s in pairs]
    if not recs:
        return rep

    def tests_of(r):
        return list(r["test_cases"].values()) if isinstance(r["test_cases"], dict) else list(r["test_cases"])

    limits = {"timeout_s": timeout_s}
    with ThreadPoolExecutor(max_workers=workers or 2) as pool:  # reference outputs: plain, not None, varied
        outs = list(pool.map(lambda r: run_calls(r["ground_truth"], tests_of(r), **limits), recs))
    items, owners = [], []
    for (where, r), out in zip(good, outs):
        at = f"{where} (task {r['task_id']})"
        bad = [(c, v) for c, (ok, v) in zip(tests_of(r), out) if not ok]
        if bad:
            rep.errors.append(f"{at}: the reference fails its own test {bad[0][0]!r}: {str(bad[0][1])[:80]}")
            continue
        vals = [v for _, v in out]
        if any(v is None for v in vals) or not all(_plain(v) for v in vals):
            rep.errors.append(f"{at}: the reference returns None or a non-plain value on some test")
        if len({repr(v) for v in vals}) < 2:
            rep.errors.append(f"{at}: all 10 tests give the same output")
        items.append((r["ground_truth"], r["ground_truth"], tests_of(r)))
        owners.append((at, None))
        for i, g in enumerate(r["guesses"]):
            items.append((g, r["ground_truth"], tests_of(r)))
            owners.append((at, i))
    reports = evaluate_many(items, workers=workers or 2, **limits)
    for (at, gi), tr in zip(owners, reports):
        if gi is None:
            if not tr.success:
                rep.errors.append(f"{at}: the reference passes only {tr.passed}/{tr.total} of its own tests "
                                  f"({tr.error or next(e for e in tr.errors if e)})")
            continue
        crashed = [e for e in tr.errors if e and e != "wrong answer"]
        failed = tr.total - tr.passed
        rep.guess_failures.append(failed)
        if crashed:
            rep.errors.append(f"{at}: guess {gi + 1} errors instead of answering wrong ({crashed[0][:80]})")
        elif failed < min_guess_fail:
            rep.errors.append(f"{at}: guess {gi + 1} fails only {failed} of {tr.total} tests (need at least "
                              f"{min_guess_fail}): guessing would succeed too often")
    return rep


def read_records(path: str | Path) -> list[tuple[str, dict]]:
    from sweet.store import iter_jsonl
    return [(f"{path}: row {row}", rec) for row, rec in iter_jsonl(Path(path))]
