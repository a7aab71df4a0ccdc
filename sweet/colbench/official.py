"""The official ColBench backend data: the Hugging Face dataset `facebook/collaborative_agent_bench`.

Tasks live in `backend_tasks/{train,test}.jsonl`, rows {problem_description, ground_truth, test_cases} with no id and
no split. They load through `datasets.load_dataset`, from the hub or from a local copy with the same layout (a folder
holding `train.jsonl`/`test.jsonl` directly also works). Ids are `official-<split>-<row:05d>`, row being the 0-based
record index in the file, so an id names the same task whichever rows are kept. The paper evaluates on the first
1,000 test rows.

The offline trajectories (`colbench_code_offline_15k_llama8b.jsonl`, written by the official simulate_interactions.py)
are rows {task, dialogue_history, answer, reward?}, k per task, laid out as k consecutive blocks of the same task list.
They become the store's trajectory rows (`sweet.records.Trajectory` schema), with our agent prompt as the first
turn so that imported dialogues match the prompt the policy is trained and evaluated with.

Errors: a malformed row raises one error naming the file, the row and the field; nothing is skipped. A silently
shorter import would change the training data unnoticed, and a corrupt row in a file can be fixed or cut.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from sweet.colbench.backend import AGENT_PROMPT, LAST_TURN_NOTE, MAX_TURNS, extract_code, opening
from sweet.colbench.tasks import Task, parse_task
from sweet.store import dumps, iter_jsonl

HUB_ID = "facebook/collaborative_agent_bench"
OFFLINE_FILE = "colbench_code_offline_15k_llama8b.jsonl"
SPLITS = ("train", "test")
_FIELDS = ("problem_description", "ground_truth", "test_cases")


def _data_file(source: str, split: str) -> tuple[str, str, Path | None]:
    """(what load_dataset gets, the data file inside it, the local file or None for the hub)."""
    p = Path(source).expanduser()
    if p.is_dir():
        for rel in (f"backend_tasks/{split}.jsonl", f"{split}.jsonl"):
            if (p / rel).is_file():
                return str(p), rel, p / rel
        raise FileNotFoundError(f"official task folder {p} has neither backend_tasks/{split}.jsonl nor {split}.jsonl")
    if p.exists():
        raise FileNotFoundError(f"official task source {source!r} is a file; name the folder holding "
                                f"backend_tasks/train.jsonl and backend_tasks/test.jsonl")
    if source.startswith((".", "/", "~")) or source.count("/") != 1:
        raise FileNotFoundError(f"official task source {source!r}: no such folder, and not a hub dataset id "
                                f"(owner/name, e.g. {HUB_ID})")
    return source, f"backend_tasks/{split}.jsonl", None


def _unavailable(source: str, err: Exception) -> RuntimeError:
    return RuntimeError(
        f"cannot load the official ColBench tasks from the Hugging Face hub dataset {source!r} "
        f"({type(err).__name__}: {err}). When the hub is unreachable from this machine and no cached copy exists: "
        f"on a machine with network access run\n"
        f"  hf download {source} backend_tasks/train.jsonl backend_tasks/test.jsonl --repo-type dataset "
        f"--local-dir colbench_official\n"
        f"copy the colbench_official folder here and set tasks.source to 'official:<that folder>' "
        f"(e.g. --set tasks.source=official:colbench_official).")


def _read_split(source: str, split: str, first_n: int | None, cache_dir: str | None) -> list[Task]:
    import datasets

    path, rel, local = _data_file(source, split)
    name = str(local) if local is not None else f"hf://datasets/{source}/{rel}"
    try:
        ds = datasets.load_dataset(path, data_files={split: rel}, split=split, cache_dir=cache_dir)
    except datasets.exceptions.DatasetGenerationError as e:
        if local is not None:
            for _ in iter_jsonl(local):  # a malformed line: this names its row
                pass
        raise ValueError(f"{name}: could not be read as JSON lines ({e.__cause__ or e})") from e
    except Exception as e:
        if local is not None:
            raise
        raise _unavailable(source, e) from e
    if first_n is not None:
        ds = ds.select(range(min(first_n, len(ds))))
    # Rows with different test names share one struct column: a test a row lacks reads back as None.
    struct_tests = isinstance(ds.features.get("test_cases"), dict)
    tasks = []
    for row, rec in enumerate(ds):
        rec = {k: rec[k] for k in _FIELDS if rec.get(k) is not None}  # an absent field reads back as None
        if struct_tests and isinstance(rec.get("test_cases"), dict):
            rec["test_cases"] = {k: v for k, v in rec["test_cases"].items() if v is not None}
        task = parse_task(name, row, rec, split)  # type: ignore[arg-type]  (only formatted into messages)
        task.task_id = f"official-{split}-{row:05d}"
        tasks.append(task)
    return tasks


def load_official_tasks(source: str = HUB_ID, splits: tuple[str, ...] = SPLITS, first_n_test: int | None = 1000,
                        first_n_train: int | None = None, cache_dir: str | None = None) -> list[Task]:
    """Official backend tasks from a hub dataset id or a local folder; the first N rows of each split (None = all).

    Only kept rows are validated. `cache_dir` is the `datasets` cache (default: its usual one)."""
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    for name, n in (("first_n_test", first_n_test), ("first_n_train", first_n_train)):
        if n is not None and n < 0:
            raise ValueError(f"{name} must be >= 0 or None, got {n}")
    limits = {"train": first_n_train, "test": first_n_test}
    return [t for split in splits for t in _read_split(source, split, limits[split], cache_dir)]


def offline_task_id(problem_description: str) -> str:
    return "off-" + hashlib.sha1(problem_description.encode("utf-8")).hexdigest()[:10]


def _task(path: Path, row: int, rec: dict) -> Task:
    if "task" not in rec:
        raise ValueError(f"{path}: row {row}: missing field 'task'")
    t = rec["task"]
    if not isinstance(t, dict):
        raise ValueError(f"{path}: row {row}: field 'task' must be an object, got {type(t).__name__}")
    try:
        task = parse_task(path, row, {k: t[k] for k in _FIELDS if k in t}, "train")
    except ValueError as e:  # name the nested field: 'task.ground_truth'
        raise ValueError(str(e).replace("field '", "field 'task.", 1)) from None
    task.task_id = offline_task_id(task.problem_description)
    return task


def _dialogue(path: Path, row: int, rec: dict, max_turns: int) -> list[dict]:
    def fail(msg: str) -> ValueError:
        return ValueError(f"{path}: row {row}: {msg}")

    if "dialogue_history" not in rec:
        raise fail("missing field 'dialogue_history'")
    hist = rec["dialogue_history"]
    if not isinstance(hist, list) or not hist:
        raise fail(f"field 'dialogue_history' must be a non-empty list of messages, got {type(hist).__name__}")
    for i, m in enumerate(hist):
        where = f"dialogue_history[{i}]"
        if not isinstance(m, dict):
            raise fail(f"field '{where}' must be an object with 'role' and 'content', got {type(m).__name__}")
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                raise fail(f"field '{where}.{key}' must be a string, got "
                           f"{type(m[key]).__name__ if key in m else 'nothing'}")
        want = "user" if i % 2 == 0 else "assistant"
        if m["role"] != want:
            raise fail(f"field '{where}.role' is {m['role']!r}, expected {want!r} (the dialogue starts with the task "
                       f"as a user message, then alternates assistant and user)")
    if hist[-1]["role"] != "assistant":
        raise fail("field 'dialogue_history' must end with the agent's (assistant) final message")
    if len(hist) // 2 > max_turns:
        raise fail(f"field 'dialogue_history' has {len(hist) // 2} assistant turns, more than max_turns={max_turns}")
    return hist


def _reward(path: Path, row: int, rec: dict) -> float | None:
    r = rec.get("reward")
    if r is None:
        return None
    if isinstance(r, bool) or not isinstance(r, (int, float)) or math.isnan(r) or not 0 <= r <= 1:
        raise ValueError(f"{path}: row {row}: field 'reward' must be a number between 0 and 1 or absent, got {r!r}")
    return float(r)


def read_offline_trajectories(path: Path | str, limit: int | None = None, max_turns: int = MAX_TURNS,
                              agent_view: str = "user") -> tuple[list[Task], list[dict]]:
    """Tasks (deduplicated, split 'train', first-seen order) and trajectory rows (file order) of an offline file.

    `agent_view` 'user': each dialogue's first message is replaced by this project's prompt for its task, and the
    last-turn note added, as a collected episode has them; 'system': the dialogue is kept as it is, after a system
    message with this project's instructions (the released layout).

    `limit` keeps the first `limit` distinct tasks with ALL their trajectories (the official file repeats the task
    list k times, so its first N rows would give one trajectory per task and no preference pairs); every row is still
    validated. Rows without a reward get reward/success/tests_passed/scoring None: score them (`needs_scoring`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"offline trajectory file {path} not found (the official one is {OFFLINE_FILE} in the "
                                f"hub dataset {HUB_ID}: hf download {HUB_ID} {OFFLINE_FILE} --repo-type dataset)")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if not 1 <= max_turns:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    tasks: dict[str, Task] = {}
    first_row: dict[str, int] = {}
    seen: dict[str, int] = {}
    rows = []
    for row, rec in iter_jsonl(path):
        task = _task(path, row, rec)
        hist = _dialogue(path, row, rec, max_turns)
        if "answer" not in rec:
            raise ValueError(f"{path}: row {row}: missing field 'answer'")
        if not isinstance(rec["answer"], str):
            raise ValueError(f"{path}: row {row}: field 'answer' must be str, got {type(rec['answer']).__name__}")
        reward = _reward(path, row, rec)
        tid = task.task_id
        if tid in tasks:
            prev = tasks[tid]
            if (prev.ground_truth, prev.test_cases) != (task.ground_truth, task.test_cases):
                raise ValueError(f"{path}: row {row}: field 'task': same problem_description as row {first_row[tid]} "
                                 f"but a different ground_truth or test_cases")
        elif limit is not None and len(tasks) >= limit:
            continue
        else:
            tasks[tid], first_row[tid] = task, row
        idx = seen.get(tid, 0)
        seen[tid] = idx + 1
        n_turns = len(hist) // 2
        prompt = opening(AGENT_PROMPT, agent_view, max_turns=max_turns, problem=task.problem_description)
        if agent_view == "system":  # the record's own dialogue, its first message included
            messages = prompt[:1] + [{"role": m["role"], "content": m["content"]} for m in hist]
        else:
            messages = prompt + [{"role": m["role"], "content": m["content"]} for m in hist[1:]]
            if n_turns == max_turns:  # as in rollout(): the message before the agent's last allowed turn says so
                messages[-2]["content"] += LAST_TURN_NOTE
        total = len(task.test_cases)
        rows.append({
            "traj_id": f"{tid}__{idx}",
            "task_id": tid,
            "sample_idx": idx,
            "messages": dumps(messages),
            "answer": extract_code(rec["answer"]),
            "reward": reward,
            "success": None if reward is None else reward == 1.0,
            "tests_passed": None if reward is None else round(reward * total),
            "tests_total": total,
            "n_turns": n_turns,
            "error": None,
            "training_info": task.ground_truth, "metric": "tests passed",
            # A record's reward comes from the released evaluate_code.py, i.e. the released check_correctness.
            "scoring": None if reward is None else "official",
        })
    return list(tasks.values()), rows


def needs_scoring(rows: list[dict]) -> list[dict]:
    """The rows whose record had no reward: score them in the sandbox before use."""
    return [r for r in rows if r["reward"] is None]
