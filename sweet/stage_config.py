"""The training stages' sections of the config (`collect.*`, `pairs.*`, `critic.*`, `candidates.*`, `actor.*`,
`evaluate.*`): what each stage of the seven computes. Kept apart from `sweet.config`, which re-exports them and
gathers them in `PipelineConfig`, so each stays a readable size."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Cfg(BaseModel):  # as sweet.config's sections
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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
