"""`task_family=frontend` through the seven stages on the `micro` profile: real Qwen2.5-Coder-0.5B policy,
SmolLM2-135M critic, real Chromium, the offline DOM-diff simulator and the named pixel similarity."""

import pytest
from mlflow.tracking import MlflowClient

from sweet import render as R
from sweet.config import load_config
from sweet.store import Catalog
from tests.conftest import MODELS_DIR

OK, WHY = R.browser_available()


@pytest.mark.slow
@pytest.mark.skipif(not OK, reason=f"no browser: {WHY}")
def test_micro_frontend_flow_end_to_end(tmp_path, prefect_api):
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"models.cache_dir={MODELS_DIR}", "models.device=cpu",
                                "task_family=frontend"])
    assert cfg.experiment == "micro-frontend"
    from flows.full import full

    state = full(cfg=cfg, return_state=True)
    assert state.is_completed(), state
    report = state.result()
    assert "Held-out frontend tasks" in report and "similarity (pixel-ssim+edges+colour-256)" in report
    assert "| sweet |" in report and "win rate vs zero_shot" in report and "is not CLIP" in report

    cat = Catalog(cfg.root / "catalog.duckdb")
    trajs = cat.query("SELECT reward, metric, tests_total FROM trajectories")
    assert len(trajs) == cfg.tasks.n_train * cfg.collect.k
    assert {t["metric"] for t in trajs} == {"pixel-ssim+edges+colour-256"} and {t["tests_total"] for t in trajs} == {0}
    assert all(0.0 <= t["reward"] <= 1.0 for t in trajs)
    pairs = cat.query("SELECT chosen_reward - rejected_reward AS margin, training_info FROM pairs")
    assert pairs and all(p["margin"] >= cfg.pairs.min_margin for p in pairs)
    assert all("<html" in p["training_info"].lower() for p in pairs)  # c = the reference page
    evals = cat.query("SELECT method, metric FROM eval_results")
    assert {e["method"] for e in evals} == {"zero_shot", "sweet"} and len(evals) == 2 * cfg.tasks.n_test

    client = MlflowClient(cfg.tracking_uri)
    exp = client.get_experiment_by_name(cfg.experiment)
    parent = [r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("prefect.flow_run_id") == str(state.state_details.flow_run_id)]
    assert {"sweet/multi_turn/similarity", "sweet/multi_turn/win_rate", "zero_shot/multi_turn/similarity"} <= \
        set(parent[0].data.metrics)

    # Every evaluated episode that produced a page keeps its final screenshot. (Baselines on the same data are
    # covered for the backend family by test_methods_e2e.)
    shots = list((cfg.root / "evaluate").rglob("screenshots/**/*.png"))
    rows = Catalog(cfg.root / "catalog.duckdb").query("SELECT method, answer FROM eval_results")
    assert len(shots) == sum(bool(r["answer"]) for r in rows)
