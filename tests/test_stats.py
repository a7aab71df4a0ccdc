"""The paired comparison that decides whether a method beat zero-shot: per-task means, then a bootstrap over tasks."""

import statistics

from sweet.stats import paired_bootstrap, per_task_mean


def test_per_task_mean_averages_samples_of_a_task_first():
    rows = [{"task_id": "a", "success": True}, {"task_id": "a", "success": False}, {"task_id": "b", "success": True}]
    assert per_task_mean(rows, "success") == {"a": 0.5, "b": 1.0}


def test_a_constant_improvement_has_a_zero_width_interval_and_pairs_only_shared_tasks():
    base = {f"t{i}": i / 10 for i in range(10)}
    better = {t: v + 0.2 for t, v in base.items()} | {"extra": 1.0}
    out = paired_bootstrap(better, base)
    assert abs(out["diff"] - 0.2) < 1e-12 and abs(out["lo"] - 0.2) < 1e-12 and abs(out["hi"] - 0.2) < 1e-12
    assert out["n_tasks"] == 10 and out["unpaired"] == 1


def test_pairing_removes_task_difficulty_from_the_interval():
    # Tasks differ a lot in difficulty; the system is 0.1 better on every task but one. Unpaired, the spread of
    # difficulty would swamp 0.1; paired, the interval excludes 0.
    base = {f"t{i}": (i % 5) / 5 for i in range(40)}
    system = {t: v + (0.1 if t != "t0" else -0.05) for t, v in base.items()}
    out = paired_bootstrap(system, base, seed=1)
    assert 0 < out["lo"] < out["diff"] < out["hi"] < 0.11
    assert abs(out["diff"] - statistics.fmean(system[t] - base[t] for t in base)) < 1e-12


def test_no_difference_straddles_zero_and_the_bootstrap_is_seeded():
    base = {f"t{i}": float(i % 2) for i in range(30)}
    system = {f"t{i}": float((i // 2) % 2) for i in range(30)}
    a, b = paired_bootstrap(system, base, seed=3), paired_bootstrap(system, base, seed=3)
    assert a == b and a["lo"] < 0 < a["hi"]
    assert paired_bootstrap({}, base)["n_tasks"] == 0
