"""`accelerate launch` command lines for the training stages (engine.launcher=accelerate).

A training stage runs its entry point as a subprocess under `accelerate launch`, so the critic and the actor use
every GPU of the node (or of several nodes) through DeepSpeed ZeRO-3 or FSDP, with the shipped configs in
configs/accelerate/ or the user's own YAML. Nothing here starts a process: `accelerate_argv` only builds the argv.

Multi-node runs read the rendezvous from the environment, as a cluster scheduler sets it per node: for each of
NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP and MAIN_PROCESS_PORT, `SWEET_<NAME>` wins over `ACCELERATE_<NAME>`;
unset means a single machine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

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
    processes = engine.num_processes
    if processes == 0:
        per_node = visible_gpus(env) if gpus_per_node is None else gpus_per_node
        if per_node < 1:
            raise RuntimeError("engine.launcher=accelerate found no GPU on this node (set engine.num_processes, "
                               "or engine.launcher=local)")
        processes = per_node * machines
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file),
            "--num_processes", str(processes)]
    for flag, value in node_flags:
        if value is not None:
            argv += [flag, value]
    return argv + ["-m", module, *map(str, args)]
