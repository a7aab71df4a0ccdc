"""The stages on engine.backend=llamacpp: the collect stage of `micro` runs in a subprocess, is killed with SIGTERM
in the middle of its collection, leaves no llama-server behind (PR_SET_PDEATHSIG: no Python clean-up runs on
SIGTERM), and a rerun resumes: it rolls out only the missing episodes, with servers that stop when the stage ends.

The policy is Qwen2.5-Coder-0.5B (the `tiny` profile's; its Q4_K_M GGUF), the simulator micro's SmolLM2-135M: one
server each. Sampling at temperature 1.0, Qwen answers on the first turn in about half of the episodes, so some
episodes are on disk while the others are still being played -- the point where the stage is killed. (SmolLM2 as
policy answers early in a few percent of episodes: a kill would mostly find nothing written.) Real models: slow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweet.agents import _llama_server as ls
from tests.conftest import MODELS_DIR

ROOT = Path(__file__).resolve().parents[1]
needs_server = pytest.mark.skipif(ls.server_binary() is None, reason="llama-server is not installed (cpu-engine)")

STAGE = """
import sys
from sweet.config import load_config
from sweet.pipeline import run_stage
from sweet.stages import COLLECT, GENERATE
cfg = load_config("micro", sys.argv[1:])
tasks = run_stage(GENERATE, cfg)
print("COLLECTING", flush=True)
print("DONE", run_stage(COLLECT, cfg, tasks), flush=True)
"""


def _servers_of(pid: int) -> set[int]:
    """llama-server processes among the descendants of `pid`."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for k in kids:
        try:
            if Path(k.exe()).name == "llama-server" and k.status() != psutil.STATUS_ZOMBIE:
                found.add(k.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@needs_server
def test_collect_killed_mid_collection_leaves_no_server_and_resumes(tmp_path):
    sets = [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db", f"models.cache_dir={MODELS_DIR}",
            "models.device=cpu", "engine.backend=llamacpp", "engine.llamacpp_parallel=4",
            "engine.llamacpp_ctx_per_slot=2048", "engine.llamacpp_threads=1", "collect.max_turns=3",
            "collect.temperature=1.0", "models.policy=Qwen/Qwen2.5-Coder-0.5B-Instruct"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TQDM_MININTERVAL="0")
    cmd = [sys.executable, "-c", STAGE, *sets]
    err1 = tmp_path / "run1.err"
    with open(err1, "w") as err:
        first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    seen: set[int] = set()
    shards_dir = None
    try:
        assert first.stdout.readline().strip() == "COLLECTING"
        # Kill once the first episodes are on disk (or, should none answer early, when the last turn starts).
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and first.poll() is None:
            seen |= _servers_of(first.pid)
            found = list((tmp_path / "micro" / "collect_trajectories").glob("*/shards"))
            shards_dir = found[0] if found else None
            if (shards_dir and any(shards_dir.glob("*.parquet"))) or "turn 3" in err1.read_text():
                break
            time.sleep(0.05)
        assert first.poll() is None, f"the stage ended before it could be killed:\n{err1.read_text()[-3000:]}"
        seen |= _servers_of(first.pid)
        assert len(seen) == 2, f"one llama-server for the policy, one for the simulator; saw {seen}"
        first.send_signal(signal.SIGTERM)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in seen), "the stage's llama-server outlived it"
    out = next((tmp_path / "micro" / "collect_trajectories").iterdir())
    assert not (out / "manifest.json").exists()
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "shards").glob("*.parquet")}
    assert len(kept) < 12

    second = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen2: set[int] = set()
    try:
        while second.poll() is None:
            seen2 |= _servers_of(second.pid)
            time.sleep(0.1)
        assert second.returncode == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert len(seen2) == 2 and not any(_alive(p) for p in seen2 | seen)  # closed when the stage ended

    from sweet.pipeline import read_manifest
    from sweet.store import read_rows

    trajs = read_rows(out / "trajectories.parquet")
    assert len(trajs) == 12 and len({t["traj_id"] for t in trajs}) == 12
    assert read_manifest(out)["summary"]["resumed_episodes"] == len(kept)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "shards").glob("*.parquet") if p.name in kept} == kept
    assert not [t["error"] for t in trajs if (t["error"] or "").startswith(("agent failed", "simulator failed"))]
    print(f"\nkilled with {len(kept)} of 12 episodes on disk; the rerun collected the other {12 - len(kept)}")
    assert kept, "nothing was on disk when the stage was killed: the resume was not exercised"


class _Closing:
    """A chat stand-in that counts its closes."""

    def __init__(self, name="m"):
        self.name, self.batch_size, self.device, self.closed = name, 8, "cpu", 0

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        return ["I WANT TO ANSWER:\ndef f(*a):\n    return 0"] * (len(convs) * num_return_sequences)

    def close(self):
        self.closed += 1


def test_best_of_n_closes_its_policy_and_critic():
    from sweet.stages.best_of_n import BestOfN

    policy, critic_model = _Closing(), _Closing()
    critic = type("Critic", (), {"model": critic_model})()
    BestOfN(policy, critic, {}, 2, 1.0, {}).close()
    assert policy.closed == 1 and critic_model.closed == 1
