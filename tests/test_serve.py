"""`make serve` / `make stop`: a real Prefect server, work pool, worker and deployments on 127.0.0.1; a stage
deployment runs through the worker against a config given as a parameter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._prefect_server import free_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_serve_runs_a_stage_deployment_then_stops(tmp_path):
    port = free_port()  # not a fixed port: another checkout's test or `make serve` may hold that one
    env = {**os.environ, "PREFECT_PORT": str(port), "MLFLOW_PORT": str(free_port()),
           "VENV": str(Path(sys.executable).parent.parent)}
    env.pop("PREFECT_HOME", None)  # the server keeps its own database; the tests' isolated home is not needed here
    env.pop("PREFECT_API_URL", None)  # serve.sh sets its own; never the session's server (tests/conftest.py)
    api = {**env, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    prefect = str(Path(sys.executable).parent / "prefect")
    try:
        up = subprocess.run(["bash", "scripts/serve.sh", "start"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        listed = subprocess.run([prefect, "deployment", "ls"], cwd=ROOT, env=api, capture_output=True, text=True,
                                timeout=60).stdout
        assert "sweet-rl/full" in listed and "train-critic/stage" in listed
        cfg = {"experiment": "serve-test", "artifacts_dir": str(tmp_path), "mlflow_uri": f"sqlite:///{tmp_path}/m.db",
               "tasks": {"source": "bundled:easy", "n_train": 2, "n_test": 1}}
        run = subprocess.run([prefect, "deployment", "run", "generate-tasks/stage", "--params",
                              json.dumps({"cfg": cfg}), "--watch", "--watch-timeout", "180"],
                             cwd=ROOT, env=api, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0 and "Completed" in run.stdout, run.stdout + run.stderr
        assert list((tmp_path / "serve-test" / "generate_tasks").glob("*/manifest.json"))
    finally:
        down = subprocess.run(["bash", "scripts/serve.sh", "stop"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
    assert "stopped prefect-server" in down.stdout
    left = subprocess.run(["pgrep", "-f", f"port {port}"], capture_output=True, text=True).stdout
    assert not left.strip(), f"server still running: {left}"
