"""What a user browses in MLflow about a stage, beyond its params and summary: progress as metrics of its run while
it works, and its episodes as traces once it is done.

Both are called from around `pipeline.run_stage` (the orchestration layer plugs them in), never from a stage's own
code, so this module is in no stage's code fingerprint: editing it reruns nothing. Traces are built from the rows
a stage already wrote (`eval_results.parquet`, `trajectories.parquet`), after it finished: a few MLflow writes per
episode, nothing on the generation path. What the agent never saw stays out of them (see `Redactor`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path

from sweet import tracking
from sweet.pipeline import MANIFEST, read_manifest
from sweet.progress import Progress
from sweet.records import turns_of
from sweet.store import loads, read_rows

log = logging.getLogger(__name__)


# ---- progress as MLflow metrics -----------------------------------------------------------------------------------
UNIT_NAMES = {"ep": "episodes", "turn": "turns", "step": "steps"}


class MlflowProgress:
    """A `sweet.progress` reporter: what the stage in `out` has done so far, as metrics of its MLflow run —
    `episodes_done` / `episodes_total` (collect, evaluate), `turns_done` / `turns_total` (candidates),
    `steps_done` / `steps_total` (training), each summed over the stage's loops of that unit. Counts are this
    run's: a resumed stage counts from what its checkpoint says (training) or from 0 (episodes, turns)."""

    def __init__(self, cfg, out: Path | str):
        self.cfg, self.out = cfg, Path(out)
        self._open: dict[str, Progress] = {}      # desc -> the loop's latest state
        self._closed: dict[str, list[int]] = {}   # unit name -> [done, total] of the loops that ended
        self._run_id: str | None = None

    def report(self, p: Progress) -> None:
        name = UNIT_NAMES.get(p.unit)
        run_id = self._run_id or self._read_run_id()
        if name is None or run_id is None:
            return
        self._open[p.desc] = p
        done, total = self._closed.get(name, [0, 0])
        for q in self._open.values():
            if UNIT_NAMES.get(q.unit) == name:
                done, total = done + q.done, total + q.total
        if p.finished:
            del self._open[p.desc]
            closed = self._closed.setdefault(name, [0, 0])
            closed[0], closed[1] = closed[0] + p.done, closed[1] + p.total
        tracking.log_metrics(self.cfg, run_id, {f"{name}_done": done, f"{name}_total": total}, step=done)

    def _read_run_id(self) -> str | None:
        f = self.out / tracking.RUN_ID_FILE  # written by `tracking.stage_run` before the stage function starts
        self._run_id = f.read_text().strip() if f.exists() else None
        return self._run_id


# ---- episodes as MLflow traces ------------------------------------------------------------------------------------
EPISODE_TABLES = {"evaluate": "eval_results.parquet", "collect_trajectories": "trajectories.parquet"}
TASK_TABLES = ("tasks.parquet", "offline_tasks.parquet")
COLLECTED = ("collect", "multi_turn")  # (method, mode) of collected episodes: the initial policy, asking allowed
SECRET_NAME = re.compile(r"(api[_-]?key|(^|_)token(_|$)|secret|password|credential)", re.I)  # not TOKENIZERS_*
MIN_SECRET = 8       # shorter values ("1", "true") would blank out ordinary words
MIN_CODE_LINE = 12   # a reference line at least this long counts as leaked code when the hidden side repeats it
_EXPORT_LOCK = threading.Lock()
ASYNC_TRACES = "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"
ISOLATED_IDS = "MLFLOW_TRACE_USE_ISOLATED_RANDOM_ID_GENERATOR"


def record_traces(cfg, stage: str, out: Path | str) -> int:
    """The episodes of the finished stage in `out` as MLflow traces linked to its run, as `tracking.traces` says;
    returns how many were written. An episode already traced (a repeated call) is not written again. Never raises:
    the stage is done, and a trace is only for browsing it."""
    table = EPISODE_TABLES.get(stage)
    if cfg.tracking.traces == "none" or table is None or not (Path(out) / table).exists():
        return 0
    try:
        return _record(cfg, stage, Path(out), table)
    except Exception as e:  # noqa: BLE001
        log.warning("episode traces of %s were not written: %r", out, e)
        return 0


def sample(rows: list[dict], per_group: int) -> list[dict]:
    """`per_group` episodes of each (method, mode), spread over the reward range: the group sorted by reward (ties
    in a fixed pseudo-random order), then its first, its last and evenly spaced ones between."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault(_system(r), []).append(r)
    out = []
    for g in groups.values():
        g = sorted(g, key=lambda r: (r["reward"], hashlib.sha256(r["traj_id"].encode()).hexdigest()))
        if len(g) <= per_group:
            out += g
        elif per_group == 1:
            out.append(g[len(g) // 2])
        else:
            out += [g[round(i * (len(g) - 1) / (per_group - 1))] for i in range(per_group)]
    return out


class Redactor:
    """Cuts what the agent never saw out of a trace's text. Everywhere: the values of environment variables whose
    name says key, token, secret, password or credential (and `api.key_env`'s), and the task's hidden tests. In
    what the hidden side wrote (the simulator's replies, the scoring's errors) also every line of a backend
    reference solution that the agent's prompt does not show, so a simulator that leaks code shows a marker, not
    the code. The reference itself (`training_info`) never goes into a trace."""

    def __init__(self, secrets: list[str], tests: list[str] = (), reference_lines: list[str] = ()):
        longest_first = lambda xs: sorted({x for x in xs if x}, key=len, reverse=True)  # noqa: E731
        self._everywhere = ([(s, "***") for s in longest_first(secrets)]
                            + [(t, "[hidden test]") for t in longest_first(tests)])
        self._hidden = [(line, "[hidden reference line]") for line in longest_first(reference_lines)]

    def agent(self, text: str | None) -> str | None:
        """Text the agent saw or wrote."""
        return self._apply(text, self._everywhere)

    def hidden(self, text: str | None) -> str | None:
        """Text written by a side that saw the reference (simulator, scoring)."""
        return self._apply(text, self._everywhere + self._hidden)

    @staticmethod
    def _apply(text, pairs):
        if not text:
            return text
        for old, new in pairs:
            text = text.replace(old, new)
        return text


def environment_secrets(cfg) -> list[str]:
    names = {n for n in os.environ if SECRET_NAME.search(n)} | {cfg.api.key_env}
    return [v for n in names if len(v := os.environ.get(n, "")) >= MIN_SECRET]


def reference_lines(reference: str, prompt: str) -> list[str]:
    """The code lines of a reference solution the agent's prompt does not show (the signature usually is shown);
    comments and docstring lines are left alone (the simulator is meant to tell those rules in words)."""
    lines = (line.strip() for line in (reference or "").splitlines())
    return [x for x in lines if len(x) >= MIN_CODE_LINE and x[0] not in "#\"'" and x not in prompt]


def _record(cfg, stage: str, out: Path, table: str) -> int:
    run_id = (out / tracking.RUN_ID_FILE).read_text().strip()
    rows = read_rows(out / table)
    if cfg.tracking.traces == "sample":
        rows = sample(rows, cfg.tracking.traces_per_group)
    c = tracking.client(cfg)
    experiment_id = c.get_run(run_id).info.experiment_id
    done = _traced(c, experiment_id, run_id)
    rows = [r for r in rows if _episode_key(r) not in done]
    if not rows:
        return 0
    tests, secrets = _hidden_tests(out), environment_secrets(cfg)
    todo, keys = rows, {_episode_key(r) for r in rows}
    for attempt in range(2):  # MLflow only logs a warning when an export fails: what it dropped is written once more
        with _exporting_to(cfg.tracking_uri):
            for r in todo:
                _write_trace(c, experiment_id, run_id, stage, out.name, r, secrets, tests.get(r["task_id"], []))
        stored = _traced(c, experiment_id, run_id)
        todo = [r for r in todo if _episode_key(r) not in stored]
        if not todo:
            break
        log.warning("%d of %d episode traces of %s were not stored%s", len(todo), len(rows), out,
                    "; writing them again" if attempt == 0 else "")
    return len(keys & stored)


def _write_trace(c, experiment_id: str, run_id: str, stage: str, fingerprint: str, row: dict, secrets: list[str],
                 tests: list[str]) -> None:
    """One episode: a root span (the task as the agent saw it -> the answer and its score) and a span per agent
    turn (the agent's message -> the simulator's reply; the last also carries the scoring). The turns were not
    timed: span times are when the trace was written."""
    msgs = loads(row["messages"])
    first = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), len(msgs))
    prompt = "\n\n".join(m["content"] for m in msgs[:first])
    backend = (row.get("metric") or "tests passed") == "tests passed"
    red = Redactor(secrets, tests, reference_lines(row.get("training_info") or "", prompt) if backend else ())
    method, mode = _system(row)
    score = ({"tests_passed": row["tests_passed"], "tests_total": row["tests_total"], "scoring": row.get("scoring")}
             if backend else {"metric": row.get("metric")})
    score |= {"reward": row["reward"], "success": bool(row["success"]), "error": red.hidden(row.get("error"))}
    attributes = {"task_id": row["task_id"], "method": method, "mode": mode, "reward": row["reward"],
                  "success": bool(row["success"]), "sample_idx": row["sample_idx"], "n_turns": row["n_turns"],
                  "stage": stage}
    tags = {"sweet.stage": stage, "sweet.fingerprint": fingerprint, "sweet.task_id": row["task_id"],
            "sweet.method": method, "sweet.mode": mode, "sweet.success": str(bool(row["success"])).lower(),
            "sweet.episode": _episode_key(row), "sweet.spans": str(1 + len(turns_of(row)))}
    t = time.time_ns()
    root = c.start_trace(f"{method}/{mode} {row['traj_id']}", span_type="AGENT", inputs={"task": red.agent(prompt)},
                         attributes=attributes, tags=tags, experiment_id=experiment_id, run_id=run_id,
                         start_time_ns=t)
    turns = turns_of(row)
    for k, turn in enumerate(turns):
        last = k == len(turns) - 1
        span = c.start_span(f"turn {turn.turn + 1}", trace_id=root.trace_id, parent_id=root.span_id,
                            span_type="CHAT_MODEL", inputs={"agent": red.agent(turn.action)},
                            attributes={"turn": turn.turn + 1, "final": last}, start_time_ns=t + 2 * k + 1)
        outputs = {"simulator": red.hidden(turn.observation)} if turn.observation is not None else {}
        if last:
            outputs |= {"answer": red.agent(row.get("answer")), "scoring": score}
        c.end_span(root.trace_id, span.span_id, outputs=outputs, end_time_ns=t + 2 * k + 2)
    c.end_trace(root.trace_id, outputs={"answer": red.agent(row.get("answer")), **score},
                end_time_ns=t + 2 * len(turns) + 1)


def _system(row: dict) -> tuple[str, str]:
    return (row["method"], row["mode"]) if "method" in row else COLLECTED


def _episode_key(row: dict) -> str:
    return "/".join((*_system(row), row["traj_id"]))


def _traced(c, experiment_id: str, run_id: str) -> set[str]:
    """The episodes that already have a whole trace in this run. A trace whose info was stored but not all of its
    spans (on a SQL store they are separate writes, and one can be dropped under load) is what a reader loading
    spans skips or shows cut short: it is deleted here, so that its episode is written again."""
    def search(include_spans: bool) -> list:
        found, token = [], None
        while True:
            page = c.search_traces(locations=[experiment_id], run_id=run_id, include_spans=include_spans,
                                   max_results=500, page_token=token)
            found += list(page)
            token = page.token
            if not token:
                return found

    def is_whole(t) -> bool:  # traces written before the span count was tagged: any spans at all
        expected = t.info.tags.get("sweet.spans")
        return bool(t.data.spans) and (expected is None or len(t.data.spans) == int(expected))

    whole = {t.info.trace_id: t for t in search(True) if is_whole(t)}
    broken = [t.info.trace_id for t in search(False) if t.info.trace_id not in whole]
    if broken:
        log.warning("%d episode traces of run %s are incomplete; deleting them to write them again", len(broken),
                    run_id)
        c.delete_traces(experiment_id, trace_ids=broken)
    return {t.info.tags.get("sweet.episode") for t in whole.values()}


def _hidden_tests(out: Path) -> dict[str, list[str]]:
    """task_id -> its hidden test calls, from the task tables of the stage's inputs (and of an offline import)."""
    inputs = read_manifest(out).get("inputs", []) if (out / MANIFEST).exists() else []
    folders = [out] + [Path(p) for p in inputs]
    tests: dict[str, list[str]] = {}
    for path in (f / name for f in folders for name in TASK_TABLES):
        if path.exists():
            for t in read_rows(path):
                tests.setdefault(t["task_id"], []).extend(s.strip() for s in t.get("test_cases") or ())
    return tests


@contextlib.contextmanager
def _exporting_to(uri: str):
    """MLflow's tracer exports to the process-wide tracking URI only, where this project otherwise names its store
    in each call: point it at `uri` while the traces are written, export synchronously (MLflow's default pool of
    export threads wrote one trace's spans and its info concurrently, and on SQLite a writer that waits too long is
    dropped with a warning: a trace went missing now and then), then put the process's setting (and
    MLFLOW_TRACKING_URI, which MLflow rewrites) back as they were. Trace and span ids come from MLflow's isolated
    generator: OpenTelemetry's default draws them from the global `random`, which every stage seeds alike, so two
    stages' traces could get the same id (a later one then took an earlier one's place)."""
    import mlflow
    from mlflow.tracing.provider import reset as reset_tracer  # the exporter reads its settings when it is built
    # Private, but the one call that puts back an unset URI (no public call does).
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", ASYNC_TRACES, ISOLATED_IDS)}
    with _EXPORT_LOCK:
        try:
            os.environ[ASYNC_TRACES] = "false"
            os.environ[ISOLATED_IDS] = "true"
            with _use_tracking_uri(uri):
                reset_tracer()
                try:
                    yield
                finally:
                    mlflow.flush_trace_async_logging()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            reset_tracer()
