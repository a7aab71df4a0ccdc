"""Generate new ColBench backend tasks with an LLM, the way the paper built its training set.

From a short seed scenario the generator writes a hidden reference function (with specifics a collaborator would
have to ask about), a high-level description ending with the signature, and 10 test calls.  A task is kept when
its text parses (AST only, never executed here), its reference runs every call without error in the sandbox
(twice, same outputs; plain values; not all outputs identical) and it is not a near-duplicate of a kept or
existing task.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

from tqdm.auto import tqdm

from sweet.sandbox import Unsupported, run_calls, strip_code_fences
from sweet.colbench.tasks import Task
from sweet.store import iter_jsonl

N_TESTS = 10
SIG_LINE = "The signature of the function is: "
DUP_THRESHOLD = 0.5  # see similarity(); the bundled tasks pairwise stay below 0.18
SHINGLE = 3

PROMPT = """You are writing a practice task for a coding assistant that has to talk with a person to find out \
exactly what they want before writing code.

Scenario: {seed}

Write three parts.
1. REFERENCE: one Python function for this scenario, 5 to 20 lines. Build in 1 to 3 specific personal choices \
that nobody could guess without asking (exact thresholds, rates, rounding, tie-breaks, output format, how bad \
input is handled). Standard library only; no printing, input, files, randomness or clock; return plain values \
(numbers, strings, booleans, None, lists, tuples, dicts); round floats to 2 decimals.
2. DESCRIPTION: what the person would ask for, in the first person, 2 to 4 sentences. Say what the function is \
for, but NOT the specific choices. End with the line: {sig}def NAME(ARGS)
3. TESTS: exactly 10 different calls of the function with literal arguments, one per line, no expected values. \
Cover normal cases, edge cases and every specific choice.

Reply in exactly this format and nothing else:
<reference>
{ex_code}</reference>
<description>
{ex_desc}
</description>
<tests>
{ex_tests}
</tests>
(The example above is only about the format; write a new task for the scenario.)"""

# Shown in the prompt only as a format example; generate_tasks also treats copies of it as duplicates.
EXAMPLE = {
    "ground_truth": "def parking_fee(minutes, is_weekend):\n    if minutes <= 15:\n        return 0.0\n"
                    "    hours = -(-minutes // 60)\n    fee = min(hours * 2.5, 18.0)\n"
                    "    if is_weekend:\n        fee = fee * 0.8\n    return round(fee, 2)\n",
    "problem_description": "I manage a small car park and need to work out what a driver pays when they leave, from "
                           "how long they stayed and whether it is the weekend. Short stops and weekends should be "
                           f"cheaper.\n\n{SIG_LINE}def parking_fee(minutes, is_weekend)",
    "test_cases": ["parking_fee(10, False)", "parking_fee(15, True)", "parking_fee(16, False)",
                   "parking_fee(60, False)", "parking_fee(61, True)", "parking_fee(125, False)",
                   "parking_fee(500, False)", "parking_fee(500, True)", "parking_fee(0, False)",
                   "parking_fee(240, True)"],
}
EXAMPLE["name"] = "parking_fee"


def build_prompt(seed: str) -> list[dict]:
    """One user message (some chat templates reject a system role)."""
    text = PROMPT.format(seed=seed.strip(), sig=SIG_LINE, ex_code=EXAMPLE["ground_truth"],
                         ex_desc=EXAMPLE["problem_description"], ex_tests="\n".join(EXAMPLE["test_cases"]))
    return [{"role": "user", "content": text}]


_OPEN = re.compile(r"<\s*(reference|description|tests)\s*>", re.I)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+\s*[.):]|test_case_\d+\s*[:=]|>>>)\s*", re.I)
_SIG = re.compile(r"\bdef\s+([A-Za-z_]\w*)\s*\(([^()]*)\)")
_LABEL = re.compile(r"(?:(?:the|its|function|python)\s+)*signature(?:\s+of\s+the\s+function)?"
                    r"(?:\s+(?:is|should\s+be|will\s+be))?\s*[:=-]?\s*\Z", re.I)
_NON_LITERAL = (ast.Name, ast.Call, ast.Attribute, ast.Lambda, ast.comprehension, ast.NamedExpr, ast.Subscript,
                ast.Starred)


def _parse_call(line: str) -> ast.expr | None:
    """Parse the longest prefix ending at ')' so trailing junk (`-> 5`, `# edge case`, `;`) is ignored."""
    for end in [i + 1 for i, ch in enumerate(line) if ch == ")"][::-1]:
        try:
            return ast.parse(line[:end], mode="eval").body
        except (SyntaxError, ValueError):
            continue
    return None


def _sections(text: str) -> dict[str, str]:
    """Each tag's text runs to its closing tag, else to the next opening tag, else to the end (a truncation)."""
    heads = list(_OPEN.finditer(text))
    out = {}
    for i, m in enumerate(heads):
        name, end = m.group(1).lower(), heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[m.end():end]
        close = re.search(rf"<\s*/\s*{name}\s*>", body, re.I)
        out.setdefault(name, body[:close.start()] if close else body)
    return out


def _clean_reference(code: str, name: str) -> str | None:
    """Keep imports, defs, classes and constant assignments; drop demo prints / __main__ blocks."""
    tree = ast.parse(code)
    if not any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
        return None
    lines = code.splitlines()
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef,
                                                   ast.Assign, ast.AnnAssign))]
    return "\n".join("\n".join(lines[(n.decorator_list[0].lineno if getattr(n, "decorator_list", None)
                                      else n.lineno) - 1:n.end_lineno]) for n in keep) + "\n"


def parse_generation(text: str) -> tuple[dict | None, str | None]:
    """(candidate, None) or (None, reason).  Reasons read 'category: detail'; the category is a fixed phrase.
    A candidate has problem_description, ground_truth, test_cases (10 call strings) and name."""
    if not text or not text.strip():
        return None, f"generation failed: {getattr(text, 'reason', None) or 'empty output'}"
    sec = _sections(re.sub(r"<think>.*?(?:</think>|\Z)", "", text, flags=re.S | re.I))  # reasoning models
    missing = [s for s in ("reference", "description", "tests") if not sec.get(s, "").strip()]
    if missing:
        return None, f"missing section: {', '.join(missing)}"
    desc = re.sub(r"```[\w+-]*", "", sec["description"]).strip()
    sigs = list(_SIG.finditer(desc))
    if not sigs:
        return None, "no signature: the description lacks 'def name(...)'"
    name, args = sigs[-1].group(1), [a.strip() for a in sigs[-1].group(2).split(",") if a.strip()]
    signature = f"def {name}({', '.join(args)})"
    body = "\n".join(ln for ln in desc[:sigs[-1].start()].splitlines() if not _SIG.search(ln))
    body = _LABEL.sub("", body.rstrip(" \t\n`*")).strip()
    if len(body) < 40:
        return None, "short description: needs a task statement besides the signature"
    code = strip_code_fences(sec["reference"]).strip("\n")
    try:
        code = _clean_reference(code, name)
    except (SyntaxError, ValueError) as e:
        return None, f"reference syntax error: {getattr(e, 'msg', e)}"
    if code is None:
        return None, f"reference mismatch: the code does not define {name}()"
    leaked = [ln.strip() for ln in code.splitlines() if len(ln.strip()) > 15 and ln.strip() in body]
    if leaked:
        return None, f"code in description: {leaked[0][:60]!r}"
    fa = next(n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef) and n.name == name).args
    code_args = [a.arg for a in fa.posonlyargs + fa.args + [fa.vararg] + fa.kwonlyargs + [fa.kwarg] if a]
    if code_args != [a.split("=")[0].split(":")[0].strip(" *") for a in args if a not in ("*", "/")]:
        return None, "reference mismatch: the signature differs from the code's arguments"
    calls: list[str] = []
    for raw in strip_code_fences(sec["tests"]).splitlines():
        line = re.sub(r"^assert\s+", "", _BULLET.sub("", raw).strip().strip("`"))
        if "(" not in line:
            continue  # prose or a blank line
        node = _parse_call(line)
        if node is None:
            return None, f"bad test call: cannot parse {line[:60]!r}"
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            node = node.left  # `f(1) == 3`: keep the call, drop the claimed value
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name):
            return None, f"bad test call: does not call {name}(): {line[:60]!r}"
        if any(isinstance(n, _NON_LITERAL) for a in node.args + [k.value for k in node.keywords] for n in ast.walk(a)):
            return None, f"bad test call: non-literal argument in {line[:60]!r}"
        call = ast.unparse(node)
        if call not in calls:
            calls.append(call)
    if len(calls) < N_TESTS:
        return None, f"too few tests: {len(calls)} distinct calls"
    return {"problem_description": f"{body}\n\n{SIG_LINE}{signature}", "ground_truth": code,
            "test_cases": calls[:N_TESTS], "name": name}, None


def _plain(v, depth: int = 0) -> bool:
    if isinstance(v, Unsupported) or depth > 50:
        return False
    if isinstance(v, (list, tuple, set, frozenset)):
        return all(_plain(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(_plain(k, depth + 1) and _plain(x, depth + 1) for k, x in v.items())
    return True


def _check(cand: dict, limits: dict, min_distinct: int) -> tuple[bool, str | None]:
    runs = [run_calls(cand["ground_truth"], cand["test_cases"], **limits) for _ in range(2)]
    for call, (ok, val) in zip(cand["test_cases"], runs[0]):
        if not ok:
            return False, f"reference fails: {call[:60]} -> {str(val)[:80]}"
        if not _plain(val):
            return False, f"non-plain output: {call[:60]}"
    vals = [v for _, v in runs[0]]
    if any(not (a == b) for a, (_, b) in zip(vals, runs[1])):
        return False, "non-deterministic: two runs disagree"
    distinct: list = []
    for v in vals:  # values may be unhashable; 1 and True count as different
        if not any(type(v) is type(d) and v == d for d in distinct):
            distinct.append(v)
    if len(distinct) < min_distinct:
        what = "all outputs identical" if len(distinct) == 1 else f"only {len(distinct)} distinct outputs"
        return False, f"uninformative tests: {what}"
    return True, None


def validate(candidates: list[dict], *, timeout_s: float = 2.0, memory_mb: int = 512, min_distinct: int = 2,
             workers: int = os.cpu_count() or 1) -> list[tuple[dict, bool, str | None]]:
    """Run each reference on its calls in the sandbox (two children each, never in this process).  Kept: every
    call returns a plain value, both runs agree, and the outputs take at least ``min_distinct`` values (the default
    2 rejects tests that cannot tell anything apart, all-None included)."""
    limits = {"timeout_s": timeout_s, "memory_mb": memory_mb}
    if not candidates:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(candidates)))) as pool:
        checks = list(pool.map(lambda c: _check(c, limits, min_distinct), candidates))
    return [(c, ok, reason) for c, (ok, reason) in zip(candidates, checks)]


def _field(t, name: str):
    return t[name] if isinstance(t, dict) else getattr(t, name)


def shingles(text: str, k: int = SHINGLE) -> frozenset:
    """Set of k-grams over lower-cased word/number tokens (punctuation and layout ignored)."""
    toks = re.findall(r"[a-z_][a-z0-9_]*|\d+(?:\.\d+)?", text.lower())
    return frozenset(tuple(toks[i:i + k]) for i in range(max(1, len(toks) - k + 1)))


def _sigs(task, k: int = SHINGLE) -> tuple[frozenset, frozenset]:
    return shingles(_field(task, "problem_description"), k), shingles(_field(task, "ground_truth"), k)


def _score(a: tuple, b: tuple) -> float:
    return max(len(x & y) / len(x | y) if x | y else 1.0 for x, y in zip(a, b))


def similarity(a, b, k: int = SHINGLE) -> float:
    """Near-duplicate score of two tasks (Task objects or candidate dicts): the larger of the Jaccard similarities
    of their descriptions' and of their references' shingle sets, so a reworded copy of the same code counts."""
    return _score(_sigs(a, k), _sigs(b, k))


class DuplicateIndex:
    """Incremental near-duplicate check: similarity >= threshold against anything added."""

    def __init__(self, threshold: float = DUP_THRESHOLD, k: int = SHINGLE):
        self.threshold, self.k, self.items = threshold, k, []

    def add(self, key: str, task) -> None:
        self.items.append((key, _sigs(task, self.k)))

    def match(self, task) -> tuple[str, float] | None:
        s = _sigs(task, self.k)
        best = max(((key, _score(s, o)) for key, o in self.items), key=lambda x: x[1], default=None)
        return best if best and best[1] >= self.threshold else None


def near_duplicates(candidates: list, existing: list = (), *, threshold: float = DUP_THRESHOLD
                    ) -> tuple[list, list[tuple[object, str]]]:
    """(kept, [(dropped, reason)]): in order, a candidate is dropped when it is near an existing task or an
    earlier kept candidate."""
    index, kept, dropped = DuplicateIndex(threshold), [], []
    for t in existing:
        index.add(str(getattr(t, "task_id", None) or t.get("task_id", "existing")), t)
    for i, c in enumerate(candidates):
        hit = index.match(c)
        if hit:
            dropped.append((c, f"near duplicate: of {hit[0]} (jaccard {hit[1]:.2f})"))
        else:
            index.add(str(_field(c, "task_id")) if isinstance(c, Task) else f"candidate-{i}", c)
            kept.append(c)
    return kept, dropped


def task_id(description: str) -> str:
    return "gen-" + hashlib.sha1(description.encode("utf-8")).hexdigest()[:10]


def generate_tasks(generator, seeds: list[str], n_tasks: int, *, test_every: int = 10, temperature: float = 0.8,
                   max_new_tokens: int = 1024, existing: list[Task] = (), batch_size: int = 8,
                   max_attempts: int | None = None, dup_threshold: float = DUP_THRESHOLD, seed: int = 0,
                   timeout_s: float = 2.0, memory_mb: int = 512, progress: bool = True) -> tuple[list[Task], dict]:
    """Generate until ``n_tasks`` valid, unique tasks exist or ``max_attempts`` generations (default
    4 * n_tasks + batch_size) are spent.  Seeds are cycled in order; batch b passes ``seed + b`` to the generator.
    The i-th kept task (1-based) is 'test' when i % test_every == 0 (0 disables), else 'train'.  Use a temperature
    above 0 when seeds repeat: greedy decoding returns the same task again, which dedup then drops."""
    if not seeds:
        raise ValueError("generate_tasks needs at least one seed")
    max_attempts = 4 * n_tasks + batch_size if max_attempts is None else max_attempts
    index, used_ids = DuplicateIndex(dup_threshold), {t.task_id for t in existing}
    index.add("prompt-example", EXAMPLE)
    for t in existing:
        index.add(t.task_id, t)
    stats = {"generated": 0, "failures": 0, "parsed": 0, "valid": 0, "duplicates": 0, "accepted": 0}
    reasons: Counter = Counter()
    tasks: list[Task] = []
    bar = tqdm(total=n_tasks, desc="taskgen", disable=not progress)
    batch_no = 0
    while len(tasks) < n_tasks and stats["generated"] < max_attempts:
        size = min(batch_size, max_attempts - stats["generated"])
        batch_seeds = [seeds[(stats["generated"] + j) % len(seeds)] for j in range(size)]
        texts = generator.generate([build_prompt(s) for s in batch_seeds], max_new_tokens=max_new_tokens,
                                   temperature=temperature, seed=seed + batch_no)
        batch_no += 1
        stats["generated"] += size
        parsed = []
        for text in list(texts)[:size] + [""] * (size - len(texts)):
            cand, why = parse_generation(text)
            if cand is None:
                stats["failures"] += why.startswith("generation failed")
                reasons[why.split(":")[0]] += 1
                continue
            stats["parsed"] += 1
            if index.match(cand) or task_id(cand["problem_description"]) in used_ids:
                stats["duplicates"] += 1
                reasons["near duplicate"] += 1
            else:
                parsed.append(cand)  # near-duplicates of kept tasks were dropped before paying for the sandbox
        for cand, ok, why in validate(parsed, timeout_s=timeout_s, memory_mb=memory_mb):
            if not ok:
                reasons[why.split(":")[0]] += 1
                continue
            stats["valid"] += 1
            tid = task_id(cand["problem_description"])
            if index.match(cand) or tid in used_ids:  # a near-twin from the same batch was kept just before
                stats["duplicates"] += 1
                reasons["near duplicate"] += 1
                continue
            if len(tasks) >= n_tasks:
                reasons["surplus"] += 1
                continue
            split = "test" if test_every and (len(tasks) + 1) % test_every == 0 else "train"
            tasks.append(Task(tid, split, cand["problem_description"], cand["ground_truth"], cand["test_cases"]))
            index.add(tid, cand)
            used_ids.add(tid)
            bar.update(1)
        bar.set_postfix(generated=stats["generated"], valid=stats["valid"])
    bar.close()
    stats["accepted"] = len(tasks)
    stats["reasons"] = dict(reasons.most_common())
    return tasks, stats


def load_seeds(path: str | Path | None = None) -> list[str]:
    """Seed scenarios, one ``{"seed": "..."}`` object per line (default: the bundled list)."""
    path = Path(path if path is not None else str(resources.files("sweet.colbench") / "data" / "seeds.jsonl"))
    out = []
    for row, rec in iter_jsonl(path):
        seed = rec.get("seed")
        if not isinstance(seed, str) or not seed.strip():
            raise ValueError(f"{path}: row {row}: field 'seed' must be a non-empty string")
        out.append(seed.strip())
    if not out:
        raise ValueError(f"{path}: no seeds")
    return out
