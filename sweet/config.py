"""Experiment configuration: one pydantic model per stage, gathered in `PipelineConfig` (the stages' sections live in
`sweet.stage_config`, the engine's and the task families' in `sweet.engine_config` and `sweet.family_config`).

Prefect renders these models as the form of a deployment run in its UI, so every field has a description.
Profiles (`tiny`, `micro`, and the paper's `paper-backend` / `paper-frontend`, all in `sweet.profiles`) are partial
overrides applied on top of the defaults, then a task family's defaults, then `--set` overrides.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sweet.engine_config import (ACCELERATE_CONFIGS_DIR, SHIPPED_ACCELERATE, EngineConfig,  # noqa: F401 (re-exported)
                                 accelerate_config_path)
from sweet.family_config import BackendConfig, FrontendConfig  # noqa: F401 (re-exported)
from sweet.profiles import FAMILY_DEFAULTS, PROFILE_FAMILY, PROFILES, QWEN_CODER_05B, with_simulator_url
from sweet.stage_config import (ActorConfig, CandidatesConfig, CollectConfig, CriticConfig,  # noqa: F401 (re-exported)
                                EvaluateConfig, PairsConfig)


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelsConfig(_Cfg):
    policy: str = Field(QWEN_CODER_05B, description="Initial policy: a Hugging Face id or a local folder.")
    simulator: str = Field(QWEN_CODER_05B, description="Human simulator (sees the hidden reference code): a local "
                           "model, or `api:<model>[@url]` for an OpenAI-compatible server such as vLLM.")
    critic_base: str = Field(QWEN_CODER_05B, description="Base LM of the critic (its own head gives advantages).")
    device: str = Field("auto", description="'auto', 'cpu' or 'cuda'.")
    cpu_precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="Training and critic scoring on the CPU: 'bf16' runs the matmuls under bf16 autocast "
        "(weights, optimiser and losses stay float32), 'fp32' runs everything in float32, 'auto' picks bf16 on a "
        "CPU with AMX bf16 tiles (~3x faster steps there) and fp32 elsewhere (bf16 is slower without them). "
        "GPUs are unaffected (bf16 weights where supported).")
    cache_dir: str = Field("artifacts/models", description="Where models converted from offline GGUF files are kept.")


class ApiConfig(_Cfg):
    """Settings for models given as `api:<model>` or `api:<model>@<base_url>` (any OpenAI-compatible server)."""
    base_url: str = Field("", description="Default base URL for `api:` models without `@url`; empty = "
                          "$OPENAI_BASE_URL, else https://api.openai.com/v1.")
    key_env: str = Field("OPENAI_API_KEY", description="Name of the environment variable holding the API key "
                         "(the key itself is never stored in the config, logs or MLflow).")
    concurrency: int = Field(8, ge=1, description="Requests in flight per model.")
    timeout_s: float = Field(60.0, gt=0, description="Seconds per request before it is retried.")
    max_retries: int = Field(4, ge=0, description="Retries on timeouts, 429 and 5xx (exponential backoff).")


class TasksConfig(_Cfg):
    source: str = Field("bundled", description="'bundled' (shipped backend tasks), 'bundled:easy' (one-liners for "
                        "smoke runs), a ColBench-format jsonl with a split field, a folder with train/test.jsonl, "
                        "'official:<folder>' (a copy of the official dataset) or 'hub:facebook/collaborative_agent_bench'.")
    first_n_test: int = Field(1000, ge=1, description="Official sources: keep the first N test rows (paper: 1000).")
    generator: str = Field("", description="Task generation: a model (e.g. 'api:gpt-4o') that writes new tasks from "
                           "seed texts; empty = use `source` as is.")
    seeds: str = Field("", description="Seed texts for generation (jsonl rows {\"seed\": ...}); empty = bundled seeds.")
    gen_temperature: float = Field(0.8, ge=0.0, description="Generator sampling temperature.")
    gen_max_new_tokens: int = Field(1024, ge=64, description="Generator tokens per task.")
    n_train: int = Field(8, ge=1, description="Training tasks used for collection.")
    n_test: int = Field(8, ge=1, description="Held-out tasks used for evaluation.")
    seed: int = 0


class TrackingConfig(_Cfg):
    """What MLflow shows besides each stage's params and metrics. In no stage's config slice: it changes what is
    logged about the results, never the results (nor a stage's fingerprint)."""
    traces: Literal["none", "sample", "all"] = Field(
        "sample", description="Episodes recorded as MLflow traces (one per episode, a span per turn, linked to the "
        "stage's run): 'sample' = `traces_per_group` of each evaluated method and mode, and of the collection, "
        "spread over the reward range; 'all' = every evaluated and collected episode; 'none'.")
    traces_per_group: int = Field(3, ge=1, description="traces=sample: episodes traced per group.")


# Settings of how a stage is executed, not of what it computes: never part of a stage's fingerprint (so its config
# slice, manifest and MLflow params leave them out; see `pipeline.config_slice`).
EXECUTION_ONLY: tuple[str, ...] = ("collect.shards", "collect.dask_address")

METHODS = ("zero_shot", "rft", "mt_dpo", "sweet", "no_training_info", "no_length_norm", "value_head", "best_of_n")
Method = Literal["zero_shot", "rft", "mt_dpo", "sweet", "no_training_info", "no_length_norm", "value_head", "best_of_n"]
# What each ablation changes in the critic; every other method uses the critic as configured.
ABLATIONS = {"no_training_info": {"use_training_info": False}, "no_length_norm": {"length_norm": False},
             "value_head": {"head": "value"}}


class PipelineConfig(_Cfg):
    method: Method = Field("sweet", description="What to train and evaluate: 'sweet' (SWEET-RL), baselines 'zero_shot' "
                           "(initial policy), 'rft' (rejection fine-tuning), 'mt_dpo' (multi-turn DPO), ablations "
                           "'no_training_info', 'no_length_norm', 'value_head', or 'best_of_n' (initial policy, "
                           "critic picks the best of N actions per turn).")
    task_family: Literal["backend", "frontend"] = Field(
        "backend", description="ColBench family: 'backend' (Python functions, hidden tests in a sandbox) or 'frontend' "
        "(HTML pages rendered in a browser, reward = page similarity).")
    agent_view: Literal["user", "system"] = Field(
        "user", description="Where the agent's instructions go: 'user' (CPU profiles; a small model follows them "
        "more reliably there), before the task in the first user message; 'system' (paper profiles, as released), "
        "in a system message, the task alone in the first user message, and imported offline dialogues kept as "
        "they are.")
    experiment: str = Field("tiny", description="Name of the experiment: artifacts/<experiment>/ and the MLflow experiment.")
    profile: str = Field("tiny", description="Profile the config was built from (informational).")
    artifacts_dir: str = Field("artifacts", description="Root folder of all run outputs.")
    mlflow_uri: str = Field("", description="MLflow tracking URI; empty = sqlite:///<artifacts_dir>/mlflow.db.")
    models: ModelsConfig = ModelsConfig()
    api: ApiConfig = ApiConfig()
    tasks: TasksConfig = TasksConfig()
    collect: CollectConfig = CollectConfig()
    pairs: PairsConfig = PairsConfig()
    critic: CriticConfig = CriticConfig()
    candidates: CandidatesConfig = CandidatesConfig()
    actor: ActorConfig = ActorConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    backend: BackendConfig = BackendConfig()
    frontend: FrontendConfig = FrontendConfig()
    engine: EngineConfig = EngineConfig()
    tracking: TrackingConfig = TrackingConfig()

    @model_validator(mode="after")
    def _check_family(self):
        if self.task_family == "frontend":
            if self.pairs.rule == "official":
                raise ValueError("pairs.rule='official' needs trajectories that pass every test (backend only); the "
                                 "frontend uses 'margin' with min_margin 0.1 (set pairs.rule=margin)")
            if self.tasks.generator:
                raise ValueError("tasks.generator writes backend tasks only; frontend tasks come from tasks.source")
            if self.collect.offline_path:
                raise ValueError("collect.offline_path imports backend trajectories only")
        elif self.critic.kind == "vlm":
            raise ValueError("critic.kind='vlm' reads screenshots of frontend pages; backend tasks have none")
        return self

    @model_validator(mode="after")
    def _check_engine(self):
        """vLLM and multi-process training are GPU paths: refuse them on a CPU-only config up front."""
        if self.models.device.strip().lower() == "cpu":
            if self.engine.backend == "vllm":
                raise ValueError("engine.backend='vllm' needs a GPU, but models.device='cpu' "
                                 "(set engine.backend=hf, or models.device=cuda/auto)")
            if self.engine.launcher == "accelerate":
                raise ValueError("engine.launcher='accelerate' trains on GPUs, but models.device='cpu' "
                                 "(set engine.launcher=local, or models.device=cuda/auto)")
        return self

    @model_validator(mode="after")
    def _apply_method(self):
        """An ablation method sets its critic switch; setting a switch by hand under another method is refused
        (the results table labels rows by method, so the label must say what was run)."""
        default = CriticConfig()
        for method, switch in ABLATIONS.items():
            for key, value in switch.items():
                if self.method == method:
                    if getattr(self.critic, key) != value:
                        object.__setattr__(self, "critic", self.critic.model_copy(update={key: value}))
                elif getattr(self.critic, key) != getattr(default, key):
                    raise ValueError(f"critic.{key}={getattr(self.critic, key)!r} is the '{method}' ablation: "
                                     f"set method={method} instead")
        if self.critic.kind == "vlm" and self.method in ("no_length_norm", "value_head"):
            raise ValueError(f"method={self.method} changes the text critic only (the vlm critic is a regression "
                             "head on mean-pooled states already); set critic.kind=text to run it")
        return self

    @property
    def root(self) -> Path:
        return Path(self.artifacts_dir) / self.experiment

    @property
    def tracking_uri(self) -> str:
        return self.mlflow_uri or f"sqlite:///{Path(self.artifacts_dir).resolve()}/mlflow.db"


def with_method(cfg: PipelineConfig, method: str) -> PipelineConfig:
    """The same experiment run with another method (ablation switches reset, then set by the new method)."""
    data = cfg.model_dump()
    default = CriticConfig()
    for switch in ABLATIONS.values():
        for key in switch:
            data["critic"][key] = getattr(default, key)
    return PipelineConfig.model_validate({**data, "method": method})


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """`collect.k=8` -> (["collect", "k"], 8). Values are read as JSON when they parse, else as strings."""
    if "=" not in item:
        raise ValueError(f"--set expects KEY=VALUE (e.g. collect.k=8), got {item!r}")
    key, raw = item.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().split("."), value


def load_config(profile: str = "tiny", overrides: list[str] | None = None) -> PipelineConfig:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
    data = _merge(PipelineConfig().model_dump(), with_simulator_url(PROFILES[profile]))
    data["profile"] = profile
    parsed = [(item, *parse_override(item)) for item in overrides or []]
    family = next((v for _, p, v in parsed if p == ["task_family"]), data["task_family"])
    if family in FAMILY_DEFAULTS:  # an unknown family is reported by validation below
        data = _merge(_merge(data, FAMILY_DEFAULTS[family]), PROFILE_FAMILY.get((profile, family), {}))
        if family != "backend" and not data["experiment"].endswith(f"-{family}"):
            data["experiment"] += f"-{family}"  # its own folder, catalog, table and MLflow experiment
    for item, path, value in parsed:
        node = data
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                raise ValueError(f"--set {item}: {'.'.join(path[:-1])!r} is not a config section")
            node = node[part]
        if path[-1] not in node:
            raise ValueError(f"--set {item}: unknown field {'.'.join(path)!r}")
        node[path[-1]] = value
    return PipelineConfig.model_validate(data)
