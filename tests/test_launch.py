"""engine.launcher=accelerate on this machine: the critic and actor stages run under a real `accelerate launch` with
two processes. With no GPU the shipped `ddp` config runs them on the CPU and syncs gradients over gloo -- the same
launcher, Trainer and data sharding a multi-GPU node uses (ZeRO-3 and FSDP need GPUs and are checked only there).
The model is a tiny random Qwen2 (tests/test_algos.py), so the figures are about the machinery, not learning."""

import json
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from sweet.config import load_config
from sweet.launch import total_processes
from sweet.pipeline import config_slice, read_manifest, run_stage, stage_dir
from sweet.stages import ACTOR, CRITIC
from sweet.store import dumps, write_rows
from tests.test_algos import critic_pairs, dialogue, save_tiny_qwen2

N_PAIRS = 8


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


def launched_cfg(tmp_path, model: str, *extra: str):
    return load_config("micro", [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db",
                                 f"models.critic_base={model}", f"models.policy={model}",
                                 "engine.launcher=accelerate", "engine.accelerate_config=ddp",
                                 "engine.num_processes=2", "critic.epochs=1", "critic.batch_size=1",
                                 "critic.grad_accum=1", "critic.save_steps=2", "critic.max_length=256",
                                 "actor.epochs=1", "actor.batch_size=1", "actor.grad_accum=1", "actor.max_length=256",
                                 *extra])


def done_folder(path: Path, rows: list[dict], name: str) -> str:
    """A finished upstream stage folder holding `rows` (what the stage before would have written)."""
    path.mkdir(parents=True)
    write_rows(rows, path / name)
    (path / "manifest.json").write_text(json.dumps({"inputs": []}))
    return str(path)


def pairs_folder(tmp_path) -> str:
    rows = [{"chosen_messages": dumps(p["chosen"]), "rejected_messages": dumps(p["rejected"]),
             "training_info": p["training_info"]} for p in critic_pairs(N_PAIRS)]
    return done_folder(tmp_path / "pairs", rows, "pairs.parquet")


def test_critic_stage_under_accelerate_launch_two_processes_and_resume(tiny_model, tmp_path, capfd):
    cfg = launched_cfg(tmp_path, tiny_model)
    pairs = pairs_folder(tmp_path)
    out = Path(run_stage(CRITIC, cfg, pairs))
    manifest = read_manifest(out)
    summary = manifest["summary"]
    assert {k: summary.pop(k) for k in ("pairs", "training_processes")} == {"pairs": N_PAIRS, "training_processes": 2}
    # The first-pass fit comes from the log of process 0 (the only one that writes it).
    assert set(summary) == {"late_reward_accuracy", "late_reward_margin"} and 0 <= summary["late_reward_accuracy"] <= 1
    assert manifest["config"]["engine.num_processes"] == 2 and manifest["config"]["engine.accelerate_config"] == "ddp"
    critic = out / "critic"
    assert {"adapter_model.safetensors", "adapter_config.json", "critic_config.json"} <= {p.name for p in
                                                                                          critic.iterdir()}
    assert not (critic / "training_args.bin").exists()
    captured = capfd.readouterr().out
    assert "accelerate.commands.launch" in captured and "--num_processes 2" in captured

    client = MlflowClient(cfg.tracking_uri)
    run_id = manifest["mlflow_run_id"]
    steps = [m.step for m in client.get_metric_history(run_id, "bt_loss")]
    # 8 pairs, one per process per step, two processes: 4 optimizer steps, each logged once (by rank 0 only).
    assert steps == [1, 2, 3, 4]
    assert client.get_metric_history(run_id, "replica_max_abs_diff")[-1].value == 0.0  # gradients were synced

    # Resume: drop the last checkpoint and the outputs, as if the launch died after step 2; the relaunch continues
    # from checkpoint-2 (the ranks' RNG states included) and ends with the same weights as the uninterrupted run.
    finished = load_file(critic / "adapter_model.safetensors")
    shutil.rmtree(out / "checkpoints" / "checkpoint-4")
    shutil.rmtree(critic)
    (out / "manifest.json").unlink()
    assert Path(run_stage(CRITIC, cfg, pairs)) == out
    resumed = load_file(critic / "adapter_model.safetensors")
    assert resumed.keys() == finished.keys()
    assert max((resumed[k] - finished[k]).abs().max().item() for k in finished) < 1e-6


def test_actor_stage_under_accelerate_launch(tiny_model, tmp_path):
    cfg = launched_cfg(tmp_path, tiny_model, "method=sweet")
    prompt = dialogue(2)[:-1]
    rows = [{"turn_id": f"t{i}", "task_id": "add", "prompt": dumps(prompt),
             "chosen": "I WANT TO ANSWER: def add(a, b): return a + b", "rejected": f"What is {i}?",
             "chosen_score": 1.0, "rejected_score": 0.0} for i in range(4)]
    out = Path(run_stage(ACTOR, cfg, done_folder(tmp_path / "cands", rows, "dpo_pairs.parquet")))
    assert read_manifest(out)["summary"] == {"dpo_pairs": 4, "training_processes": 2}
    assert (out / "actor" / "adapter_model.safetensors").is_file() and (out / "actor" / "actor_config.json").is_file()


def test_a_failed_launch_raises_one_error_with_the_childrens_last_lines(tiny_model, tmp_path):
    cfg = launched_cfg(tmp_path, tiny_model)
    empty = done_folder(tmp_path / "pairs", [], "pairs.parquet")
    with pytest.raises(RuntimeError, match=r"(?s)train_critic: `accelerate launch` exited with status \d+.*"
                                           r"raised:\n.*holds no preference pairs"):
        run_stage(CRITIC, cfg, empty)
    assert not (Path(stage_dir(CRITIC, cfg, (empty,))) / "manifest.json").exists()


# ------------------------------------------------------------------------------------------------ fingerprints
def test_launch_settings_count_only_in_launched_runs(tmp_path):
    local = load_config("micro", ["engine.accelerate_config=fsdp", "engine.num_processes=4"])
    assert not any(k.startswith("engine.") for k in config_slice(local, CRITIC.config_keys))
    assert config_slice(local, CRITIC.config_keys) == config_slice(load_config("micro"), CRITIC.config_keys)
    launched = load_config("micro", ["engine.launcher=accelerate", "engine.num_processes=4"])
    sl = config_slice(launched, ACTOR.config_keys)
    assert (sl["engine.launcher"], sl["engine.accelerate_config"], sl["engine.num_processes"]) == \
        ("accelerate", "zero3", 4)
    doubled = load_config("micro", ["engine.launcher=accelerate", "engine.num_processes=8"])
    assert stage_dir(CRITIC, launched, ("p",)) != stage_dir(CRITIC, doubled, ("p",))  # another global batch


def test_every_gpu_is_resolved_to_a_count(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("SWEET_NUM_MACHINES", "2")
    cfg = load_config("micro", ["engine.launcher=accelerate"])
    assert total_processes(cfg.engine) == 8
    assert config_slice(cfg, CRITIC.config_keys)["engine.num_processes"] == 8
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match="found no GPU"):
        config_slice(cfg, CRITIC.config_keys)


# --------------------------------------------------------------------------------------- stopping a launch
# The "launch" is a Python process that starts a grandchild, as torchrun starts the ranks, and forwards SIGTERM to it
# as torchrun does; both print their pids.
FAKE_LAUNCH = ("import os, signal, subprocess, sys, time\n"
               "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
               "signal.signal(signal.SIGTERM, lambda *a: (g.terminate(), sys.exit(1)))\n"
               "print(os.getpid(), g.pid, flush=True)\n"
               "time.sleep(120)\n")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def wait_dead(pids, timeout_s=20.0) -> bool:
    import time

    end = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def test_an_interrupted_launch_stops_every_process_of_it(tmp_path, monkeypatch):
    import sys

    from sweet import launch

    monkeypatch.setattr(launch, "accelerate_argv", lambda *a, **k: [sys.executable, "-c", FAKE_LAUNCH])
    pids: list[int] = []

    def interrupted_on_the_pids_line(line="", **kw):  # stands for Ctrl-C / a cancellation while training runs
        if line.split() and all(x.isdigit() for x in line.split()):
            pids.extend(int(x) for x in line.split())
            raise KeyboardInterrupt

    monkeypatch.setattr(launch, "print", interrupted_on_the_pids_line, raising=False)
    with pytest.raises(KeyboardInterrupt):
        launch.run_launched("train_critic", load_config("micro"), tmp_path, ["pairs"])
    assert len(pids) == 2 and wait_dead(pids)


def test_a_launch_whose_parent_dies_outright_is_stopped(tmp_path):
    import subprocess
    import sys

    parent = ("import sys\nfrom sweet import launch\nfrom sweet.config import load_config\n"
              f"launch.accelerate_argv = lambda *a, **k: [sys.executable, '-c', {FAKE_LAUNCH!r}]\n"
              f"launch.run_launched('train_critic', load_config('micro'), {str(tmp_path)!r}, ['pairs'])\n")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        while not (line.split() and all(x.isdigit() for x in line.split())):
            line = proc.stdout.readline()
            assert line, "the fake launch never started"
        pids = [int(x) for x in line.split()]
        proc.kill()  # SIGKILL: no handler, no finally in the parent runs
        proc.wait()
        assert wait_dead(pids)
    finally:
        proc.kill()
