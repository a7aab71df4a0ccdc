"""Content-addressed stages: the fingerprint, the output folder and the run of one stage.

A stage's fingerprint = hash(its config slice, its inputs' fingerprints, its code: see `sweet.codehash`). Its
outputs live under `artifacts/<experiment>/<stage>/<fingerprint>/` and a `manifest.json` written last marks them
complete, so:
- the same fingerprint twice is a cache hit (the orchestrator's cache key is this fingerprint too);
- a stage that died halfway reruns in the same folder and skips the shards it already finished.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sweet import codehash, models, precision, tracking
from sweet.config import EXECUTION_ONLY, PipelineConfig
from sweet.engine_config import server_binary

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Stage:
    name: str                       # folder name and MLflow run name
    fn: Callable[..., dict]          # fn(cfg, out_dir, *input_dirs) -> summary metrics
    config_keys: tuple[str, ...]     # dotted config paths the outputs depend on
    # Its code is the import closure of this module inside sweet/ (see sweet.codehash), never a list kept by hand.
    # Default: fn's module. A wrapper that only changes how the stage runs (the Dask fan-out) keeps the stage's.
    code_module: str | None = None

    @property
    def module(self) -> str:
        return self.code_module or self.fn.__module__


def _llamacpp(data: dict) -> bool:
    return data["engine"]["backend"] == "llamacpp"


def _launched(data: dict) -> bool:
    return data["engine"]["launcher"] == "accelerate"


# Settings that count only in some runs: a backend run's outputs do not depend on how pages would be rendered, and
# a single-process training stage not on how `accelerate launch` would have spread it.
COUNTS_ONLY_IF: dict[str, Callable[[dict], bool]] = {
    "frontend": lambda data: data["task_family"] == "frontend",
    "backend": lambda data: data["task_family"] == "backend",  # the frontend's simulator reads pages, not dialogue
    "evaluate.scoring": lambda data: data["task_family"] == "backend",  # collected pages are not scored by tests
    "engine.llamacpp_parallel": _llamacpp, "engine.llamacpp_ctx_per_slot": _llamacpp,
    "engine.launcher": _launched, "engine.accelerate_config": _launched, "engine.num_processes": _launched,
    "models.cpu_precision": lambda data: _on_cpu(data["models"]["device"]),
}


def _on_cpu(device: str) -> bool:
    try:
        return models.pick_device(device) == "cpu"
    except (RuntimeError, ValueError):  # cuda asked for, none here: the stage itself fails with that message
        return False


def _has_llama_server() -> bool:
    try:
        return server_binary() is not None
    except FileNotFoundError:  # a wrong $SWEET_LLAMA_SERVER: the stage itself fails with that message
        return True


def config_slice(cfg: PipelineConfig, keys: tuple[str, ...]) -> dict[str, Any]:
    data = cfg.model_dump()
    for path in EXECUTION_ONLY:  # how a stage runs (e.g. on how many shards), not what it computes
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node.get(part, {})
        node.pop(leaf, None)
    out = {}
    for key in keys:
        if key in COUNTS_ONLY_IF and not COUNTS_ONLY_IF[key](data):
            continue
        node: Any = data
        for part in key.split("."):
            node = node[part]
        out[key] = node
    if out.get("engine.backend") == "llamacpp" and not _has_llama_server():
        # Without the binary the stage samples with transformers (sweet.agents.llamacpp warns): the fingerprint says
        # so, or installing llama-server later would turn transformers' results into cache hits for llama.cpp.
        out["engine.backend"] = "hf (engine.backend=llamacpp, llama-server not installed)"
    if "models.cpu_precision" in out:  # 'auto' is bf16 or fp32 by this CPU: the fingerprint names what ran
        out["models.cpu_precision"] = precision.resolve_cpu_precision(out["models.cpu_precision"])
    if out.get("engine.num_processes") == 0:  # "every GPU": the count sets the global batch, so it is resolved
        from sweet.launch import total_processes
        out["engine.num_processes"] = total_processes(cfg.engine)
    return out


def code_version(stage: Stage, root: Path = codehash.ROOT) -> str:
    return codehash.code_version(stage.module, root)


def fingerprint(stage: Stage, cfg: PipelineConfig, inputs: tuple[str, ...]) -> str:
    payload = {
        "stage": stage.name,
        "config": config_slice(cfg, stage.config_keys),
        # An input is an upstream stage folder: <stage>/<fingerprint>; its name carries its whole history.
        "inputs": [f"{Path(p).parent.name}/{Path(p).name}" for p in inputs],
        "code": code_version(stage),
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def stage_dir(stage: Stage, cfg: PipelineConfig, inputs: tuple[str, ...]) -> Path:
    return cfg.root / stage.name / fingerprint(stage, cfg, inputs)


def is_done(out: Path) -> bool:
    return (Path(out) / MANIFEST).exists()


def run_stage(stage: Stage, cfg: PipelineConfig, *inputs: str, parent_run_id: str | None = None) -> str:
    """Run one stage unless its fingerprinted folder is already complete; return that folder."""
    for p in inputs:
        if not is_done(Path(p)):
            raise FileNotFoundError(f"stage {stage.name}: input {p} is incomplete (no {MANIFEST}); run its stage first")
    out = stage_dir(stage, cfg, inputs)
    if is_done(out):
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    params = config_slice(cfg, stage.config_keys)
    with precision.cpu_precision(cfg.models.cpu_precision), \
            tracking.stage_run(cfg, stage.name, out, params, parent_run_id=parent_run_id) as run_id:
        summary = stage.fn(cfg, out, *inputs) or {}
        elapsed = time.time() - started
        tracking.log_metrics(cfg, run_id, {**{k: v for k, v in summary.items() if _is_number(v)}, "wall_s": elapsed})
    manifest = {
        "stage": stage.name,
        "fingerprint": out.name,
        "inputs": list(inputs),
        "config": params,
        "summary": summary,
        "wall_s": round(elapsed, 2),
        "mlflow_run_id": run_id,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    tmp.replace(out / MANIFEST)
    return str(out)


def read_manifest(out: Path | str) -> dict[str, Any]:
    return json.loads((Path(out) / MANIFEST).read_text())


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
