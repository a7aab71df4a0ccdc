"""Every method (SWEET-RL, its baselines and ablations) end to end on `micro`, through `sweet compare`: the real
flow, models, sandbox, store and MLflow. Stages the methods share run once (cache hits after the first)."""

import pytest

from sweet.cli import main
from sweet.config import METHODS, load_config
from sweet.store import Catalog
from tests.conftest import MODELS_DIR


@pytest.mark.slow
def test_every_method_runs_and_joins_one_table(tmp_path, capsys, prefect_api):
    sets = [f"artifacts_dir={tmp_path}", f"models.cache_dir={MODELS_DIR}", "models.device=cpu"]
    assert main(["compare", "--profile", "micro"] + [x for s in sets for x in ("--set", s)]) == 0
    out = capsys.readouterr().out
    cfg = load_config("micro", sets)
    table = (cfg.root / "results.md").read_text()
    assert table in out
    results, paired = table.split("\n\n| method |")[:2]  # the results table, then the paired one
    rows = [line.split("|")[1].strip() for line in results.splitlines()[2:] if line.startswith("| ")]
    assert rows == list(METHODS), table  # one row per method, in the paper's order
    paired_rows = [line.split("|")[1].strip() for line in paired.splitlines()[2:] if line.startswith("| ")]
    assert paired_rows == list(METHODS), table  # each paired with zero_shot on the same tasks (its own row: baseline)
    cat = Catalog(cfg.root / "catalog.duckdb")
    got = {r["method"]: r["n"] for r in cat.query("SELECT method, count(*) AS n FROM eval_results GROUP BY 1")}
    assert got == {m: cfg.tasks.n_test for m in METHODS}
    # One collection served every method that learns from data.
    assert len(list((cfg.root / "collect_trajectories").glob("*/manifest.json"))) == 1
    assert len(list((cfg.root / "train_critic").glob("*/manifest.json"))) == 4  # sweet (+best_of_n), 3 ablations
