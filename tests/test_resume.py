"""A collection that dies halfway keeps its finished episodes; the rerun adds only the missing ones.

`ScriptedLM` stands in for the policy/simulator so the crash can be placed exactly (the real model runs in the
end-to-end test); the sandbox, the store and the stage folder logic are the real ones.
"""

from pathlib import Path

import pytest

import sweet.stages.collect as collect_stage
from sweet.config import load_config
from sweet.pipeline import read_manifest, run_stage
from sweet.stages import COLLECT, GENERATE
from sweet.store import read_rows

GOOD = "I WANT TO ANSWER:\ndef add(a, b):\n    return a + b"


class ScriptedLM:
    def __init__(self, fail_on_call=None):
        self.calls, self.fail_on_call = 0, fail_on_call

    def generate(self, convs, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise KeyboardInterrupt("killed mid-collection")
        # Tasks whose signature takes (a, b) answer at once; the others ask first and answer on turn 2.
        out = []
        for c in convs:
            if c[0]["role"] == "system" and "hidden code" in c[0]["content"]:
                out.append("No extra rules.")
            elif "(a, b" in c[0]["content"] or any(m["role"] == "assistant" for m in c):
                out.append(GOOD)
            else:
                out.append("Any special cases?")
        return out


def test_killed_collection_resumes_without_loss_or_duplicates(tmp_path, monkeypatch):
    cfg = load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                "tasks.n_train=4", "collect.k=2", "collect.max_turns=2"])
    tasks = run_stage(GENERATE, cfg)
    first = ScriptedLM(fail_on_call=3)  # call 1: agents turn 1, call 2: simulator, call 3: agents turn 2 -> dies
    monkeypatch.setattr(collect_stage, "load_chat_models", lambda *a, **k: (first, first))
    with pytest.raises(KeyboardInterrupt):
        run_stage(COLLECT, cfg, tasks)
    out = next((tmp_path / "micro" / "collect_trajectories").iterdir())
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "shards").glob("*.parquet")}
    assert 0 < len(kept) < 8, "the episodes that answered on turn 1 were written before the crash"
    assert not (out / "manifest.json").exists()

    second = ScriptedLM()
    monkeypatch.setattr(collect_stage, "load_chat_models", lambda *a, **k: (second, second))
    assert Path(run_stage(COLLECT, cfg, tasks)) == out
    trajs = read_rows(out / "trajectories.parquet")
    ids = [t["traj_id"] for t in trajs]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert {p.name: p.stat().st_mtime_ns for p in (out / "shards").glob("*.parquet") if p.name in kept} == kept
    # The rerun rolled out only the missing episodes: the kept ones were read back, not played again.
    assert read_manifest(out)["summary"]["resumed_episodes"] == len(kept)
    assert len(list((out / "shards").glob("*.parquet"))) == 8
    assert second.calls >= 1
    assert len(read_rows(out / "turns.parquet")) == sum(t["n_turns"] for t in trajs)
