"""Reporting evaluation results: per-(method, mode) summaries with 95% intervals, the markdown tables, the chart,
and the cross-run comparison of every method evaluated on the same tasks under the same protocol.

Backend rows are scored by tests passed, under the rules their `scoring` column names (`evaluate.scoring`, a column
of the backend tables too); frontend rows by page similarity (the metric's name travels with every row, and a
frontend table also gives the win rate against `frontend.win_rate_baseline`).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from sweet import tracking
from sweet.chat import prompt_length
from sweet.colbench import lite
from sweet.colbench.backend import GENERATION_FAILED
from sweet.config import METHODS
from sweet.pipeline import config_slice
from sweet.stats import paired_bootstrap, per_task_mean
from sweet.store import loads, read_rows, write_rows


def _half(v: list[float]) -> float:
    """Half-width of a normal-approximation 95% interval of the mean."""
    return 1.96 * statistics.pstdev(v) / math.sqrt(len(v)) if len(v) > 1 else 0.0


def is_frontend(rows: list[dict]) -> bool:
    return bool(rows) and rows[0].get("metric", "tests passed") != "tests passed"


def scoring_of(rows: list[dict]) -> str:
    """The test-scoring rules of backend rows ("strict", "official", or "mixed (...)"); rows written before the
    setting existed were scored by the only rules there were, "strict"."""
    kinds = sorted({x.get("scoring") or "strict" for x in rows})
    return kinds[0] if len(kinds) == 1 else f"mixed ({', '.join(kinds)})"


def summarize(rows: list[dict]) -> dict:
    """Backend: % tests passed (mean reward), success rate (all tests pass) and mean turns; frontend: mean page
    similarity (with its metric's name). Normal-approximation 95% intervals over episodes. Episodes that ended on
    an API failure count as 0 and are reported as `failed`."""
    n = len(rows)
    r = [x["reward"] for x in rows]
    s = [float(x["success"]) for x in rows]
    failed = sum((x.get("error") or "").startswith(GENERATION_FAILED) for x in rows)
    if is_frontend(rows):
        return {"n": n, "similarity": statistics.fmean(r) if n else 0.0, "similarity_ci": _half(r) if n else 0.0,
                "metric": rows[0]["metric"], "mean_turns": statistics.fmean(x["n_turns"] for x in rows) if n else 0.0,
                "no_page": sum((x.get("error") or "").startswith("no page") for x in rows), "failed": failed}
    return {"n": n, "scoring": scoring_of(rows),
            "tests_passed": 100 * statistics.fmean(r) if n else 0.0, "tests_passed_ci": 100 * _half(r) if n else 0.0,
            "success_rate": 100 * statistics.fmean(s) if n else 0.0, "success_ci": 100 * _half(s) if n else 0.0,
            "mean_turns": statistics.fmean(x["n_turns"] for x in rows) if n else 0.0, "failed": failed,
            # Behaviour: share of episodes with at least one turn before the answer (a question), answer length.
            "asked_rate": 100 * statistics.fmean(x["n_turns"] > 1 for x in rows) if n else 0.0,
            "answer_chars": statistics.fmean(len(x.get("answer") or "") for x in rows) if n else 0.0,
            **_values_stated(rows)}


def _values_stated(rows: list[dict]) -> dict:
    """Tasks that name their hidden values (the lite tier): the share of them the final answers state, in %."""
    v = [x["values_stated"] for x in rows if x.get("values_stated") is not None]
    return {"values_stated": 100 * statistics.fmean(v)} if v else {}


def paired_with(group: list[dict], base: list[dict], seed: int = 0) -> dict:
    """A system against the baseline on the same tasks: per task, the mean over its samples; then the mean
    difference with a bootstrap 95% interval over tasks, for % tests passed and for success rate."""
    out = {"paired_tasks": 0}
    for key, name in (("reward", "tests_passed"), ("success", "success")):
        d = paired_bootstrap(per_task_mean(group, key), per_task_mean(base, key), seed=seed)
        out |= {f"delta_{name}": 100 * d["diff"], f"delta_{name}_lo": 100 * d["lo"],
                f"delta_{name}_hi": 100 * d["hi"], "paired_tasks": d["n_tasks"]}
    named = [[x for x in rows if x.get("values_stated") is not None] for rows in (group, base)]
    if all(named):  # the hidden values stated, paired the same way (not counted in `paired_tasks`)
        d = paired_bootstrap(*(per_task_mean(rows, "values_stated") for rows in named), seed=seed)
        out |= {"delta_values_stated": 100 * d["diff"], "delta_values_stated_lo": 100 * d["lo"],
                "delta_values_stated_hi": 100 * d["hi"]}
    return out


def summarize_by_method(rows: list[dict], baseline: str = "zero_shot") -> dict[str, dict]:
    """One summary per "<method>/<mode>", in the order the rows first show them. Frontend summaries also carry the
    win rate against `baseline`'s pages in the same mode (per task, mean similarity over samples)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['method']}/{r['mode']}", []).append(r)
    out = {k: summarize(v) for k, v in groups.items()}
    for key, group in groups.items():
        method, _, mode = key.partition("/")
        base = groups.get(f"{baseline}/{mode}")
        if base and method != baseline and not is_frontend(group):
            out[key] |= paired_with(group, base) | {"baseline": baseline}
        if is_frontend(group) and base and method != baseline:
            from sweet.colbench.similarity import win_rate
            w = win_rate(_by_task(group), _by_task(base))
            out[key] |= {"win_rate": 100 * w["win_rate"], "win_rate_lo": 100 * w["ci95"][0],
                         "win_rate_hi": 100 * w["ci95"][1], "win_rate_n": w["n"], "baseline": baseline}
    return out


def _by_task(rows: list[dict]) -> dict[str, float]:
    scores: dict[str, list[float]] = {}
    for r in rows:
        scores.setdefault(r["task_id"], []).append(r["reward"])
    return {k: statistics.fmean(v) for k, v in scores.items()}


def results_table(summaries: dict[str, dict]) -> str:
    if any("similarity" in m for m in summaries.values()):
        return frontend_table(summaries)
    lines = ["| method | mode | scoring | % tests passed | success rate | mean turns | episodes | API failures |",
             "|---|---|---|---|---|---|---|---|"]
    for key, m in summaries.items():
        system, _, mode = key.partition("/")
        lines.append(f"| {system} | {mode or 'multi_turn'} | {m['scoring']} | "
                     f"{m['tests_passed']:.1f} ± {m['tests_passed_ci']:.1f} | "
                     f"{m['success_rate']:.1f} ± {m['success_ci']:.1f} | {m['mean_turns']:.2f} | {m['n']} | "
                     f"{m['failed']} |")
    return "\n".join(lines) + "\n\n(± is a 95% interval over episodes.)\n" + paired_table(summaries)


def paired_table(summaries: dict[str, dict]) -> str:
    """Each system minus the baseline on the same tasks (bootstrap 95% interval over tasks), and how it behaves."""
    rows = [(k, m) for k, m in summaries.items() if "delta_tests_passed" in m]
    if not rows:
        return ""
    base = rows[0][1]["baseline"]
    values = any("values_stated" in m for m in summaries.values())
    lines = [f"\n| method | mode | scoring | Δ % tests passed vs {base} | Δ success rate vs {base} | tasks paired | "
             "asked (% episodes) | mean turns | answer chars |" + (" hidden values stated (%) |" if values else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if values else "")]
    for key, m in summaries.items():
        system, _, mode = key.partition("/")
        if "delta_tests_passed" in m:
            tp = f"{m['delta_tests_passed']:+.1f} [{m['delta_tests_passed_lo']:+.1f}, {m['delta_tests_passed_hi']:+.1f}]"
            sr = f"{m['delta_success']:+.1f} [{m['delta_success_lo']:+.1f}, {m['delta_success_hi']:+.1f}]"
            paired = str(m["paired_tasks"])
        elif system == base:
            tp = sr = "(baseline)"
            paired = "—"
        else:
            continue
        lines.append(f"| {system} | {mode or 'multi_turn'} | {m['scoring']} | {tp} | {sr} | {paired} | "
                     f"{m.get('asked_rate', 0):.1f} | {m['mean_turns']:.2f} | {m.get('answer_chars', 0):.0f} |"
                     + (f" {_values_cell(m)} |" if values else ""))
    note = ("\n\n(Δ = mean over held-out tasks of the system's per-task mean minus the baseline's, in points; [95% "
            "bootstrap interval over tasks]. An interval that excludes 0 is a difference the data can tell.")
    if values:
        note += (" Hidden values stated: the share of each task's hidden values (what the agent must ask for) that "
                 "the final answer states, averaged over episodes; Δ paired as above.")
    return "\n".join(lines) + note + ")\n"


def _values_cell(m: dict) -> str:
    if "values_stated" not in m:
        return "—"
    if "delta_values_stated" not in m:
        return f"{m['values_stated']:.1f}"
    return (f"{m['values_stated']:.1f} (Δ {m['delta_values_stated']:+.1f} [{m['delta_values_stated_lo']:+.1f}, "
            f"{m['delta_values_stated_hi']:+.1f}])")


def frontend_table(summaries: dict[str, dict]) -> str:
    first = next(iter(summaries.values()), {})
    metric = first.get("metric", "?")
    base = next((m["baseline"] for m in summaries.values() if "baseline" in m), None)
    lines = [f"| method | mode | similarity ({metric}) | win rate vs {base or '—'} (%) | mean turns | episodes | "
             "no page | API failures |", "|---|---|---|---|---|---|---|---|"]
    for key, m in summaries.items():
        system, _, mode = key.partition("/")
        win = (f"{m['win_rate']:.1f} [{m['win_rate_lo']:.1f}, {m['win_rate_hi']:.1f}]" if "win_rate" in m else "—")
        lines.append(f"| {system} | {mode or 'multi_turn'} | {m['similarity']:.3f} ± {m['similarity_ci']:.3f} | {win} | "
                     f"{m['mean_turns']:.2f} | {m['n']} | {m['no_page']} | {m['failed']} |")
    mixed = {m.get("metric") for m in summaries.values()}
    note = f" Rows scored with different metrics: {sorted(mixed)}." if len(mixed) > 1 else ""
    return ("\n".join(lines) + "\n\n(similarity ± a 95% interval over episodes; win rate = share of held-out tasks "
            "whose page is closer to the reference than the baseline's, ties half, [Wilson 95% interval]. "
            f"Metric '{metric}'{'' if metric.startswith('clip') else ' is not CLIP'}.{note})\n")


def dialogue_sample(rows: list[dict], k: int = 2) -> str:
    """The best and worst evaluation dialogues of each method, readable."""
    parts = []
    for method, mode in sorted({(r["method"], r["mode"]) for r in rows}):
        mine = sorted((r for r in rows if (r["method"], r["mode"]) == (method, mode)),
                      key=lambda r: (-r["reward"], r["task_id"]))
        for label, picked in (("best", mine[:k]), ("worst", mine[-k:][::-1])):
            for r in picked:
                parts.append(f"## {method} ({mode}) — {label} — {r['task_id']} (reward {r['reward']:.2f})\n")
                msgs = loads(r["messages"])
                for m in msgs[prompt_length(msgs):]:
                    parts.append(f"**{m['role']}**:\n```\n{m['content']}\n```\n")
    return "\n".join(parts)


def plot_summaries(summaries: dict[str, dict]):
    """A bar chart of the headline score of each "<method>/<mode>" with its 95% interval (a matplotlib figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3))
    names = list(summaries)
    key = "similarity" if any("similarity" in m for m in summaries.values()) else "tests_passed"
    ax.bar(names, [summaries[n][key] for n in names], yerr=[summaries[n][f"{key}_ci"] for n in names],
           capsize=4, color="#4C72B0")
    if key == "similarity":
        ax.set_ylabel(f"similarity ({next(iter(summaries.values()))['metric']})")
        ax.set_title("Held-out frontend tasks")
    else:
        ax.set_ylabel("% tests passed")
        ax.set_title("Held-out backend tasks")
    fig.tight_layout()
    return fig


def plot_name(summaries: dict[str, dict]) -> str:
    """The chart's file name: what it plots."""
    return "similarity.png" if any("similarity" in m for m in summaries.values()) else "tests_passed.png"


def write_report(cfg, out: Path, rows: list[dict], run_id: str | None, baseline: str | None = None,
                 tasks: list | None = None) -> dict:
    """eval_results.parquet, the table (results.md), dialogues and chart on disk and in MLflow; returns the flat
    metrics ("<method>/<mode>/<name>"). Systems are paired with `baseline` (default: the frontend's win-rate
    baseline setting, `zero_shot` unless changed). Backend `tasks` that name their hidden values (the lite tier) add
    each episode's `values_stated` (share of them its final answer states) and its column in the table."""
    if tasks and not is_frontend(rows):
        values = {t.task_id: t.values() for t in tasks}
        rows = [r | {"values_stated": lite.values_stated(r.get("answer"), values.get(r["task_id"], []))} for r in rows]
    write_rows(rows, out / "eval_results.parquet")
    summaries = summarize_by_method(rows, baseline or cfg.frontend.win_rate_baseline)
    table = results_table(summaries)
    (out / "results.md").write_text(table)
    (out / "dialogues.md").write_text(dialogue_sample(rows))
    if run_id:
        tracking.log_text(cfg, run_id, table, "results.md")
        tracking.log_dict(cfg, run_id, summaries, "results.json")
        tracking.log_file(cfg, run_id, out / "dialogues.md")
        tracking.log_figure(cfg, run_id, plot_summaries(summaries), plot_name(summaries))
    return {f"{m}/{k}": v for m, s in summaries.items() for k, v in s.items() if isinstance(v, (int, float))}


def compare(cfg, tasks_dir: str, stage_name: str, config_keys: tuple[str, ...]) -> tuple[list[Path], dict[str, dict]]:
    """Every method evaluated on these tasks with this protocol, policy and simulator (the latest run of each):
    their result files and one summary per (method, mode) — the comparison table's rows. `stage_name` and
    `config_keys` are the evaluate stage's (`sweet.stages.EVALUATE`): its runs are `<cfg.root>/<stage_name>/*/`."""
    want = {k: v for k, v in config_slice(cfg, config_keys).items() if k != "method"}
    latest: dict[str, tuple[str, Path]] = {}
    for manifest in sorted((cfg.root / stage_name).glob("*/manifest.json")):
        m = json.loads(manifest.read_text())
        same = {k: v for k, v in m["config"].items() if k != "method"} == want
        if same and m["inputs"][:1] == [str(tasks_dir)]:
            method = m["config"]["method"]
            if method not in latest or m["finished_at"] > latest[method][0]:
                latest[method] = (m["finished_at"], manifest.parent / "eval_results.parquet")
    files = [latest[k][1] for k in sorted(latest, key=_method_order)]
    rows = [r for f in files for r in read_rows(f)]
    return files, summarize_by_method(rows, cfg.frontend.win_rate_baseline)


def _method_order(method: str) -> tuple[int, str]:
    return (METHODS.index(method), "") if method in METHODS else (len(METHODS), method)
