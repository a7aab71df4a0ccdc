"""`accelerate launch` command lines for the training stages (engine.launcher=accelerate).

A training stage runs its entry point as a subprocess under `accelerate launch`, so the critic and the actor use
every GPU of the node (or of several nodes) through DeepSpeed ZeRO-3 or FSDP, with the shipped configs in
configs/accelerate/ or the user's own YAML. Nothing here starts a process: `accelerate_argv` only builds the argv.

`run_launched` is what a training stage calls when engine.launcher=accelerate: it writes the config, runs
`python -m sweet.train` under `accelerate launch`, streams the children's output, and returns the summary rank 0
wrote. Every rank runs the same stage code (the Trainer shards the data and syncs gradients); resume works as in a
single process, from the newest checkpoint in the stage's folder.

Multi-node runs read the rendezvous from the environment, as a cluster scheduler sets it per node: for each of
NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP and MAIN_PROCESS_PORT, `SWEET_<NAME>` wins over `ACCELERATE_<NAME>`;
unset means a single machine.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sweet.config import EngineConfig, accelerate_config_path

# (accelerate launch flag, environment variable suffix); read from SWEET_<suffix>, else ACCELERATE_<suffix>.
_MULTI_NODE = (("--num_machines", "NUM_MACHINES"), ("--machine_rank", "MACHINE_RANK"),
               ("--main_process_ip", "MAIN_PROCESS_IP"), ("--main_process_port", "MAIN_PROCESS_PORT"))
_INTEGER = {"NUM_MACHINES", "MACHINE_RANK", "MAIN_PROCESS_PORT"}


def _env(env: Mapping[str, str], suffix: str) -> str | None:
    for prefix in ("SWEET_", "ACCELERATE_"):
        value = env.get(prefix + suffix, "").strip()
        if value:
            if suffix in _INTEGER and not value.isdigit():
                raise ValueError(f"{prefix}{suffix}={value!r} must be a non-negative integer")
            return value
    return None


def visible_gpus(env: Mapping[str, str] | None = None) -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES when set (as torch would count it), else torch's count."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import torch
        return torch.cuda.device_count()
    except ImportError:
        return 0


def total_processes(engine: EngineConfig, *, env: Mapping[str, str] | None = None,
                    gpus_per_node: int | None = None) -> int:
    """Training processes over all machines: engine.num_processes, or (0) this node's GPUs times the machines."""
    if engine.num_processes:
        return engine.num_processes
    env = os.environ if env is None else env
    per_node = visible_gpus(env) if gpus_per_node is None else gpus_per_node
    if per_node < 1:
        raise RuntimeError("engine.launcher=accelerate found no GPU on this node (set engine.num_processes, "
                           "or engine.launcher=local)")
    return per_node * int(_env(env, "NUM_MACHINES") or 1)


def accelerate_argv(module: str, args: Sequence[str], engine: EngineConfig, *,
                    env: Mapping[str, str] | None = None, gpus_per_node: int | None = None) -> list[str]:
    """argv that runs `python -m <module> <args>` under `accelerate launch` with `engine`'s settings.

    --num_processes is the total over all machines (accelerate's meaning): engine.num_processes, or when that is 0
    the GPUs of this node times the number of machines.
    """
    env = os.environ if env is None else env
    if not module or module.startswith("-"):
        raise ValueError(f"training entry point must be a module name, got {module!r}")
    config_file = accelerate_config_path(engine.accelerate_config)
    if not config_file.is_file():  # a shipped name whose file is missing: an installed copy without configs/
        raise FileNotFoundError(f"engine.accelerate_config={engine.accelerate_config!r}: {config_file} is missing")
    node_flags = [(flag, _env(env, suffix)) for flag, suffix in _MULTI_NODE]
    machines = int(dict(node_flags)["--num_machines"] or 1)
    if machines > 1 and not dict(node_flags)["--main_process_ip"]:
        raise ValueError(f"{machines} machines need SWEET_MAIN_PROCESS_IP (or ACCELERATE_MAIN_PROCESS_IP): "
                         "the address of machine rank 0")
    processes = total_processes(engine, env=env, gpus_per_node=gpus_per_node)
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file),
            "--num_processes", str(processes)]
    for flag, value in node_flags:
        if value is not None:
            argv += [flag, value]
    return argv + ["-m", module, *map(str, args)]


# "ValueError: ...", possibly behind torch's "[rank0]: " prefix: the last line of a child's traceback.
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)\b:.*)$")
LAUNCH_DIR = "launch"      # in a stage's folder: the config the children read and the summary rank 0 writes
SUMMARY_FILE = "summary.json"


def run_launched(stage: str, cfg, out: Path, inputs: Sequence[str], *, tail_lines: int = 40) -> dict:
    """Run training stage `stage` (train_critic, train_actor) under `accelerate launch`; return its summary.

    The children's output is echoed line by line; a failure raises one error with the exit status, the exception
    lines the children printed and their last `tail_lines` lines. If this process is interrupted (Ctrl-C, a Prefect
    cancellation, any exception) the whole launch is stopped with it, and if it dies outright the launcher gets
    SIGTERM, which torchrun passes on to every rank: no orphaned training keeps the GPUs. Checkpoints stay in the
    stage folder, so a relaunch resumes where the last one stopped.
    """
    work = Path(out) / LAUNCH_DIR
    work.mkdir(parents=True, exist_ok=True)
    (work / SUMMARY_FILE).unlink(missing_ok=True)
    (work / "config.json").write_text(cfg.model_dump_json(indent=1))
    argv = accelerate_argv("sweet.train", [stage, "--config", work / "config.json", "--out", out, *inputs],
                           cfg.engine)
    print(f"{stage}: {' '.join(map(str, argv))}", flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    errors: dict[str, None] = {}  # each distinct exception line of the children, in order
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            bufsize=1, start_new_session=True, preexec_fn=_term_when_parent_dies)
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail.append(line.rstrip("\n"))
            found = _EXCEPTION.match(line)
            if found:
                errors.setdefault(found.group(1).rstrip(), None)
        proc.wait()
    except BaseException:
        stop_launch(proc)
        raise
    finally:
        proc.stdout.close()
    if proc.returncode != 0:
        # The launcher's own report (every rank's exit code) comes last and would push the cause out of the tail.
        raise RuntimeError(f"{stage}: `accelerate launch` exited with status {proc.returncode}. The training "
                           "processes raised:\n" + ("\n".join(errors) or "(no exception line seen)")
                           + "\nLast lines of output:\n" + "\n".join(tail))
    summary = work / SUMMARY_FILE
    if not summary.is_file():
        raise RuntimeError(f"{stage}: `accelerate launch` exited cleanly but rank 0 wrote no {summary}")
    return json.loads(summary.read_text())


def _term_when_parent_dies() -> None:  # in the launcher, between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_launch(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the launch's process group (accelerate, torchrun, every rank); SIGKILL what is left after grace_s."""
    if proc.returncode is not None:  # reaped: its pid, the group's id, may belong to someone else by now
        return

    def signal_group(sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    # Watched without reaping until the group has had its SIGKILL too: while unreaped, the id cannot be reused.
    while time.monotonic() < deadline and os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.1)
    signal_group(signal.SIGKILL)  # ranks can outlive their launcher
    proc.wait()


def replica_check(cfg, run_id: str):
    """A TrainerCallback that, at the end of data-parallel training (DDP), logs `replica_max_abs_diff` to MLflow:
    the largest difference between any trainable weight on this rank and on rank 0 — 0.0 when the gradient sync
    worked. Sharded runs (ZeRO-3, FSDP) hold different shards per rank by design and are not checked."""
    import torch
    import torch.distributed as dist
    from accelerate import PartialState
    from accelerate.utils import DistributedType
    from transformers import TrainerCallback

    from sweet import tracking

    class ReplicaCheck(TrainerCallback):
        def on_train_end(self, args, state, control, model=None, **kwargs):
            if PartialState().distributed_type not in (DistributedType.MULTI_GPU, DistributedType.MULTI_CPU):
                return  # one process, or sharded weights
            flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters() if p.requires_grad])
            ref = flat.clone()
            dist.broadcast(ref, src=0)
            diff = (flat - ref).abs().max().reshape(1)
            dist.all_reduce(diff, op=dist.ReduceOp.MAX)
            if state.is_world_process_zero:
                tracking.log_metrics(cfg, run_id, {"replica_max_abs_diff": diff.item()}, step=state.global_step)

    return ReplicaCheck()


def trainer_callbacks(cfg, out: Path) -> list:
    """What every training stage hands its Trainer: MLflow metrics into the stage's run (whose id the stage folder
    `out` keeps, so a resumed run continues the same curves), the DDP replica check, and the steps done to whatever
    progress reporters this process has (`sweet.progress`; none in a launched child)."""
    from sweet import progress, tracking

    run_id = (out / tracking.RUN_ID_FILE).read_text().strip()
    return [tracking.trainer_callback(cfg, run_id), replica_check(cfg, run_id),
            progress.trainer_callback(Path(out).parent.name)]
