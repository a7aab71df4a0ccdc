"""Experiment configuration: one pydantic model per stage, gathered in `PipelineConfig`.

Prefect renders these models as the form of a deployment run in its UI, so every field has a description.
Profiles (`tiny`, `micro`, and the paper's `paper-backend` / `paper-frontend`, all in `sweet.profiles`) are partial
overrides applied on top of the defaults, then a task family's defaults, then `--set` overrides.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sweet.engine_config import (ACCELERATE_CONFIGS_DIR, SHIPPED_ACCELERATE, EngineConfig,  # noqa: F401 (re-exported)
                                 accelerate_config_path)
from sweet.family_config import BackendConfig, FrontendConfig  # noqa: F401 (re-exported)
from sweet.profiles import FAMILY_DEFAULTS, PROFILE_FAMILY, PROFILES, QWEN_CODER_05B, with_simulator_url


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


class CollectConfig(_Cfg):
    offline_path: str = Field("", description="Import this offline trajectory file (official format, e.g. "
                              "colbench_code_offline_15k_llama8b.jsonl) instead of rolling out the policy.")
    offline_limit: int = Field(0, ge=0, description="Import only the first N distinct tasks of the offline file, "
                               "with all their trajectories (0 = all).")
    k: int = Field(4, ge=1, description="Trajectories per training task.")
    max_turns: int = Field(2, ge=1, le=10, description="Agent turns per episode (paper: 10).")
    max_new_tokens: int = Field(256, ge=8, description="Agent tokens per turn.")
    sim_max_new_tokens: int = Field(48, ge=8, description="Simulator tokens per reply.")
    temperature: float = Field(0.7, ge=0.0, description="Agent sampling temperature during collection "
                               "(paper: 1.0 for an 8B model; a 0.5B model drifts off-protocol at 1.0).")
    batch_episodes: int = Field(32, ge=1, description="Sequences per batched generate call (all live episodes "
                                "advance in lockstep; decoding on a CPU is memory-bound, so bigger batches are cheaper).")
    seed: int = 0
    shards: int = Field(1, ge=1, description="Split the training tasks into this many disjoint shards, each rolled "
                        "out as its own Prefect task on a Dask cluster (1 = one process, no Dask). Each shard loads "
                        "its own models and writes its episodes into the same stage folder. Not part of the "
                        "fingerprint: the same episodes are collected (identical with `api:` models or greedy "
                        "decoding; a sampling local model draws from one seed per batch, so, as after a resume, "
                        "other batches give other samples).")
    dask_address: str = Field("", description="shards > 1: the Dask scheduler to run the shards on, e.g. "
                              "'tcp://10.0.0.5:8786' (its workers need this project installed, the models, and "
                              "the artifacts folder on a shared filesystem); empty = a temporary local cluster on "
                              "127.0.0.1, one worker process per shard up to the CPU count. Not part of the "
                              "fingerprint.")

    @field_validator("dask_address")
    @classmethod
    def _scheduler_address(cls, v: str) -> str:
        v = v.strip()
        if v and not re.fullmatch(r"([a-z][a-z0-9+.-]*://)?[^/\s]+/?", v):
            raise ValueError(f"collect.dask_address={v!r} is not a Dask scheduler address "
                             "(e.g. 'tcp://10.0.0.5:8786'; empty = a temporary local cluster)")
        return v


class PairsConfig(_Cfg):
    rule: Literal["official", "margin"] = Field(
        "official", description="'official' (backend, released code): tasks with a fully successful trajectory; "
        "chosen = the best, rejected = each strictly worse one. 'margin': every pair whose rewards differ by at "
        "least min_margin (frontend uses 0.1).")
    min_margin: float = Field(1e-6, ge=0.0, description="'margin' rule: smallest reward difference of a pair.")
    max_pairs_per_task: int = Field(2, ge=0, description="Cap per task; widest reward margins first (0 = no cap, "
                                    "every pair the rule gives, as released).")


# Optimiser settings of the critic and the actor. Defaults = transformers' own (AdamW betas (0.9, 0.999), linear decay
# to 0, no warm-up), which every CPU result in the README was measured with; the paper profiles set the released
# recipe (`profiles.RELEASED_OPTIM`, from the OpenRLHF train_dpo the released scripts run).
Schedule = Annotated[Literal["linear", "cosine"], Field(description="Learning-rate schedule: 'linear' (transformers' "
                                                        "default, to 0) or 'cosine' (released: to min_lr_ratio x lr).")]
MinLrRatio = Annotated[float, Field(ge=0.0, le=1.0, description="schedule 'cosine': the final lr / lr (released 0.1).")]
WarmupRatio = Annotated[float, Field(ge=0.0, lt=1.0, description="Share of the steps warming lr up from 0 (released 0.03).")]
AdamBetas = Annotated[tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]],
                      Field(description="AdamW (beta1, beta2); released (0.9, 0.95).")]


class CriticConfig(_Cfg):
    variant: Literal["paper", "official"] = Field(
        "paper", description="'paper': BT on the sum of per-turn mean log-ratios (Eq. 2-3); "
        "'official': one token-mean over all assistant tokens (released code).")
    beta: float = Field(1.0, gt=0.0, description="Bradley-Terry temperature on the advantages.")
    nll_coef: float = Field(0.01, ge=0.0, description="Weight of the NLL term on the chosen trajectory.")
    lr: float = Field(2e-4, gt=0.0, description="Learning rate (LoRA; the paper's full FT uses 2e-7).")
    epochs: int = Field(1, ge=1)
    batch_size: int = Field(2, ge=1)
    grad_accum: int = Field(1, ge=1)
    max_length: int = Field(1024, ge=64, description="Tokens per (c + trajectory); longer pairs are cut from the start of the dialogue.")
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    save_steps: int = Field(10, ge=1, description="Checkpoint every N optimizer steps (resume point).")
    length_norm: bool = Field(True, description="Advantage = mean log-ratio over a turn's tokens (Eq. 2); "
                              "False = sum (ablation 'without length normalisation').")
    use_training_info: bool = Field(True, description="Give the critic the reference solution c "
                                    "(False = ablation 'critic without c').")
    head: Literal["lm", "value"] = Field("lm", description="'lm': advantages read off the LM head (SWEET-RL); "
                                         "'value': a scalar head on mean-pooled states regressed on rewards "
                                         "(ablation). kind='vlm' always has a regression head.")
    kind: Literal["text", "vlm"] = Field("text", description="'text': an LM reads the dialogue and c as text. 'vlm' "
                                         "(frontend; the paper's): a Qwen2-VL + regression head also reads each "
                                         "page's screenshot, c = the reference's (`algos/vlm_critic.py`).")
    image_max_pixels: int = Field(0, ge=0, description="kind='vlm': pixels per screenshot at most (28x28 = one "
                                  "image token); 0 = the processor's (Qwen2-VL: 28*28*1280).")
    lora: bool = Field(True, description="LoRA (reference = adapter off) or full fine-tuning (a frozen copy as reference).")
    schedule: Schedule = "linear"
    min_lr_ratio: MinLrRatio = 0.1
    warmup_ratio: WarmupRatio = 0.0
    adam_betas: AdamBetas = (0.9, 0.999)
    seed: int = 0


class CandidatesConfig(_Cfg):
    n: int = Field(16, ge=2, description="Candidate actions sampled per turn (paper: 16).")
    temperature: float = Field(1.0, ge=0.0, description="Candidate sampling temperature (paper: 1.0).")
    max_new_tokens: int = Field(256, ge=8)
    turn_fraction: float = Field(1.0, gt=0.0, le=1.0, description="Share of offline turns used (official code: 0.1).")
    max_turns: int = Field(8, ge=1, description="Upper bound on turns sampled (keeps small profiles small).")
    pairs_per_turn: int = Field(1, ge=1, description="DPO pairs drawn per turn (top half vs bottom half).")
    batch_size: int = Field(32, ge=1, description="Sequences per batched generate call (turns x n).")
    unmarked_code: Literal["keep", "rank_last"] = Field(
        "keep", description="backend, turns before the last: a candidate holding a function definition without the "
        "answer marker (read as a question, though it asks for nothing). 'keep': ranked by its critic score (the "
        "paper); 'rank_last': below every other candidate of its turn, so a DPO pair may reject it, never choose it.")
    unparsed_answer: Literal["keep", "rank_last"] = Field(
        "keep", description="backend, turns before the last: a candidate with the answer marker whose answer is not a "
        "function that parses (a question or prose after the marker: the episode ends and scores 0). 'keep': ranked by "
        "its critic score (the paper); 'rank_last': below every other candidate of its turn, never chosen.")
    seed: int = 0


class ActorConfig(_Cfg):
    rft_min_reward: float = Field(1.0, ge=0.0, le=1.0, description="method 'rft': fine-tune on trajectories with at "
                                  "least this reward (1.0 = successful, all tests pass).")
    rft_best_per_task: bool = Field(False, description="method 'rft': keep only each task's best trajectory among "
                                    "those (the frontend's choice, where no page 'succeeds').")
    beta: float = Field(0.1, gt=0.0, description="DPO beta (paper: 0.1).")
    nll_coef: float = Field(0.01, ge=0.0, description="NLL on the chosen action (paper: 0.01).")
    nll_scope: Literal["action", "sequence"] = Field(
        "action", description="method 'sweet': what the NLL term reads: the chosen action ('action', TRL's 'sft' "
        "term) or every token of the chosen sequence, history included ('sequence', as the released actor run).")
    lr: float = Field(1e-4, gt=0.0, description="Learning rate (LoRA; the paper's full FT uses 2e-7).")
    epochs: int = Field(1, ge=1, description="Epochs of every actor method; rft_epochs / mt_dpo_epochs override it.")
    batch_size: int = Field(2, ge=1)
    grad_accum: int = Field(1, ge=1)
    rft_epochs: int = Field(0, ge=0, description="method 'rft': epochs (0 = `epochs`).")
    rft_grad_accum: int = Field(0, ge=0, description="method 'rft': gradient accumulation (0 = `grad_accum`); the "
                                "global batch is batch_size x this x training processes (paper: 32 for RFT).")
    mt_dpo_epochs: int = Field(0, ge=0, description="method 'mt_dpo': epochs (0 = `epochs`).")
    max_length: int = Field(1024, ge=64)
    lora: bool = Field(True, description="LoRA (reference = adapter disabled; CPU default) or full fine-tuning of "
                       "the whole model against a frozen copy of its initial weights (the paper's, at lr 2e-7).")
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    save_steps: int = Field(10, ge=1)
    schedule: Schedule = "linear"
    min_lr_ratio: MinLrRatio = 0.1
    warmup_ratio: WarmupRatio = 0.0
    adam_betas: AdamBetas = (0.9, 0.999)
    seed: int = 0

    def for_method(self, method: str) -> "ActorConfig":
        """The settings `method` trains with: its own epochs / gradient accumulation where set."""
        update = {"rft": {"epochs": self.rft_epochs, "grad_accum": self.rft_grad_accum},
                  "mt_dpo": {"epochs": self.mt_dpo_epochs}}.get(method, {})
        return self.model_copy(update={k: v for k, v in update.items() if v})


class EvaluateConfig(_Cfg):
    modes: list[Literal["multi_turn", "single_turn", "oracle"]] = Field(
        ["multi_turn"], min_length=1, description="'multi_turn' (ask, then answer), 'single_turn' (answer at once) "
        "and/or 'oracle' (answer at once, the hidden decisions written into the task: tasks with `decisions` only).")
    agents: list[str] = Field([], description="More systems evaluated zero-shot in the same table: model ids, "
                              "folders or `api:<model>[@url]` (e.g. 'api:gpt-4o').")
    max_turns: int = Field(2, ge=1, le=10, description="Agent turns per episode (paper: 10).")
    max_new_tokens: int = Field(256, ge=8)
    sim_max_new_tokens: int = Field(48, ge=8)
    temperature: float = Field(0.0, ge=0.0, description="Agent sampling temperature: 0 = greedy decoding (CPU "
                               "default); the released evaluation samples at 1.0 (the paper profiles).")
    batch_episodes: int = Field(32, ge=1)
    n_samples: int = Field(1, ge=1, description="Episodes per test task (the released evaluation: 1, sampled at "
                           "1.0; more samples shrink the sampling noise of the table).")
    diagnostic_samples: int = Field(0, ge=0, description="Methods that trained a critic: episodes per task for the "
                                    "critic's best-of-N curve (N = 1, 2, 4, 8), drawn beyond `n_samples` and kept "
                                    "out of the table; 0 or <= n_samples: the curve uses the table's episodes.")
    diagnostic_tasks: int = Field(0, ge=0, description="The first this many held-out tasks get `diagnostic_samples` "
                                  "episodes (0: every one).")
    best_of_n: int = Field(4, ge=2, description="method 'best_of_n': actions sampled per turn, the critic keeps the best.")
    best_of_n_temperature: float = Field(1.0, gt=0.0, description="method 'best_of_n': sampling temperature.")
    scoring: Literal["strict", "official"] = Field(
        "strict", description="How backend answers are scored against the hidden tests, in evaluation and in "
        "collection alike (one setting, so the rewards a policy is trained on and the ones it is evaluated with "
        "follow the same rules; part of both stages' fingerprints). 'strict' (CPU profiles): the answer runs once, "
        "its helpers and imports visible to its functions, values compared with ==. 'official' (the paper "
        "profiles' default): the released check_correctness: 0 for any answer containing import os/sys, sudo, "
        "transformers, exit(, quit( or argparse; the code re-executed per test with its top-level names invisible "
        "inside its functions (a helper, an import or recursion fails), the reference likewise; 1 s per call; a "
        "reference value of None never passes. Both run in the same sandbox. Frontend pages are unaffected "
        "(page similarity).")
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
