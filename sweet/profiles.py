"""Profiles: partial configs applied over the defaults. `tiny` (the default run, CPU), `laptop` (the learning study
on the lite tier, CPU), `micro` (end-to-end tests), and the paper's settings for GPU machines: `paper-backend`,
`paper-frontend` (and `paper`, an alias). Also the defaults each task family needs, per profile where sizes differ.

The paper profiles take their hyper-parameters from the paper (arXiv 2503.15478, Section 5 and Appendix) and, where
the paper is silent, from the released code (facebookresearch/sweet_rl's README commands and the OpenRLHF fork they
run): lr 2e-7 (full fine-tuning of critic and actor), beta 0.1, NLL 0.01 (actor), batch 8, critic epochs 4 (backend)
/ 8 (frontend), actor 1 epoch, 10 turns, 16 candidates at temperature 1.0; the released critic (token mean, no NLL
term), optimiser, evaluation sampling and simulator view (README, Fidelity). `paper-eq` is paper-backend with the
critic in the paper's Eq. 2-3 form. The simulator runs behind an OpenAI-compatible server (vLLM, as in the paper)
whose URL is read from $SWEET_SIMULATOR_URL each time a profile is loaded (default http://127.0.0.1:8000/v1); it
goes into the simulator's own `api:<model>@<url>` ref, so `api.base_url` stays free for other API systems (the
GPT-4o baseline).
"""

from __future__ import annotations

import os
from typing import Any

QWEN_CODER_05B = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOLLM2_135M = "HuggingFaceTB/SmolLM2-135M-Instruct"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN2_VL_7B = "Qwen/Qwen2-VL-7B-Instruct"
SIMULATOR_URL_ENV = "SWEET_SIMULATOR_URL"
DEFAULT_SIMULATOR_URL = "http://127.0.0.1:8000/v1"
SIMULATOR_URL_TOKEN = "${SWEET_SIMULATOR_URL}"  # filled in by `with_simulator_url` when a profile is loaded


def simulator_url() -> str:
    """$SWEET_SIMULATOR_URL (the paper profiles' simulator server), else the local vLLM default."""
    url = os.environ.get(SIMULATOR_URL_ENV, "").strip() or DEFAULT_SIMULATOR_URL
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"${SIMULATOR_URL_ENV}={url!r} is not an http(s) URL (e.g. {DEFAULT_SIMULATOR_URL})")
    return url.rstrip("/")


def with_simulator_url(node: Any) -> Any:
    """The profile with its simulator URL placeholder filled in (read now, so one profile serves any host)."""
    if isinstance(node, dict):
        return {k: with_simulator_url(v) for k, v in node.items()}
    if isinstance(node, str) and SIMULATOR_URL_TOKEN in node:
        return node.replace(SIMULATOR_URL_TOKEN, simulator_url())
    return node


# The released optimiser (the OpenRLHF fork's cli/train_dpo.py, which the released README runs for both the critic
# and the actor): AdamW betas (0.9, 0.95), no weight decay, cosine_with_min_lr to 0.1x lr after ceil(3%) warm-up steps.
RELEASED_OPTIM: dict[str, Any] = {"schedule": "cosine", "min_lr_ratio": 0.1, "warmup_ratio": 0.03,
                                  "adam_betas": [0.9, 0.95]}
# The released critic run (README: train_dpo --mean_log_prob, no --nll_loss_coef): one token mean over the trajectory's
# assistant tokens (critic.variant=official, whose ranking also leaves c out of the reference) and no NLL term.
RELEASED_CRITIC: dict[str, Any] = {"variant": "official", "nll_coef": 0.0, "lora": False, "lr": 2e-7, "beta": 0.1,
                                   "batch_size": 1, "grad_accum": 1, "save_steps": 100, **RELEASED_OPTIM}
# The actor as released: full fine-tuning at 2e-7 against a frozen reference, NLL 0.01 over the whole chosen sequence
# (the actor run passes no prompt and no response template, so OpenRLHF's loss mask is every token). Baselines: RFT 4
# epochs at global batch 32 (rft_grad_accum 4 on 8 GPUs) and multi-turn DPO 8 epochs, as issue 15 reads the paper's
# appendix -- not checked here: DESIGN.md records RFT's batch 32 but no baseline epochs, and the released scripts have
# no RFT or MT-DPO command. Global batch = batch_size x grad_accum x training processes (1 x 1 x 8 GPUs = 8).
RELEASED_ACTOR: dict[str, Any] = {"lora": False, "lr": 2e-7, "beta": 0.1, "nll_coef": 0.01, "nll_scope": "sequence",
                                  "epochs": 1, "rft_epochs": 4, "rft_grad_accum": 4, "mt_dpo_epochs": 8,
                                  "batch_size": 1, "grad_accum": 1, "save_steps": 100, **RELEASED_OPTIM}
# The paper's frontend critic: Qwen2-VL-7B with a scalar regression head, reading the screenshots (critic.kind=vlm),
# 8 epochs on the released optimiser schedule. A LoRA on its language model (the vlm critic has no full fine-tuning
# here), so a LoRA learning rate rather than the full-FT 2e-7: 1e-4 is this project's choice, not the paper's. The
# LM-critic settings of RELEASED_CRITIC (variant, beta, NLL) do not apply to a regression head and are left out.
VLM_CRITIC: dict[str, Any] = {**RELEASED_OPTIM, "kind": "vlm", "lora": True, "lr": 1e-4, "epochs": 8,
                              "batch_size": 1, "grad_accum": 1, "save_steps": 100, "max_length": 16384}
# Evaluation as released (simulate_interactions.py: the agent samples at temperature 1.0), with 3 episodes per task
# rather than 1 so the table's sampling noise shrinks; evaluate.n_samples=1 is the released protocol exactly and
# evaluate.temperature=0 greedy.
RELEASED_EVAL: dict[str, Any] = {"max_turns": 10, "temperature": 1.0, "n_samples": 3, "batch_episodes": 256}

PAPER_PROFILES: dict[str, dict[str, Any]] = {
    # The paper's backend setting: Llama-3.1-8B policy and critic trained from the released
    # offline trajectories, a Llama-3.1-70B simulator behind an OpenAI-compatible vLLM server at $SWEET_SIMULATOR_URL
    # (default 127.0.0.1:8000/v1), the official 1,000 test tasks, 10 turns, 16 candidates at temperature 1.0.
    # Hardware: one node of 8x A100-80GB (or H100/H200) for training and sampling -- ZeRO-3 full fine-tuning of the
    # 8B critic plus its frozen reference copy; the vLLM policy engine on the same node -- and, for the 70B
    # simulator server, a second node or 4-8 more GPUs of the same kind (bf16 weights alone are ~140 GB).
    # Critic and actor are fully fine-tuned (lr 2e-7, each against a frozen copy of the initial model). Global batch
    # = batch_size x grad_accum x training processes: 1 x 1 x 8 GPUs = the paper's 8; on fewer GPUs raise grad_accum
    # (and actor.rft_grad_accum). The simulator sees the dialogue as one transcript message, and the agent its
    # instructions as a system message, as released.
    "paper-backend": {
        "experiment": "paper-backend",
        "agent_view": "system",
        "models": {"policy": LLAMA_8B, "critic_base": LLAMA_8B,
                   "simulator": f"api:meta-llama/Llama-3.1-70B-Instruct@{SIMULATOR_URL_TOKEN}", "device": "cuda"},
        "tasks": {"source": "hub:facebook/collaborative_agent_bench", "n_train": 5000, "n_test": 1000},
        "collect": {"offline_path": "data/colbench_code_offline_15k_llama8b.jsonl", "k": 3, "max_turns": 10,
                    "max_new_tokens": 1024, "sim_max_new_tokens": 256, "temperature": 1.0},
        "critic": {**RELEASED_CRITIC, "epochs": 4, "max_length": 8192},
        # turn_fraction 0.1 as in the released code; max_turns only caps it (the offline data has ~75k turns).
        "candidates": {"n": 16, "temperature": 1.0, "max_new_tokens": 1024, "turn_fraction": 0.1,
                       "max_turns": 1_000_000, "pairs_per_turn": 4, "batch_size": 256},
        "actor": {**RELEASED_ACTOR, "max_length": 16384},
        # The released scoring rules (evaluate.scoring also scores collection), so rewards match the paper's.
        "evaluate": {**RELEASED_EVAL, "max_new_tokens": 1024, "sim_max_new_tokens": 256,
                     "modes": ["multi_turn", "single_turn"], "scoring": "official"},
        "backend": {"simulator_view": "transcript"},
        # vLLM leaves room on GPU 0 for the transformers critic that scores candidates in the same stage (8B bf16,
        # plus its reference copy); raise data_parallel_size to sample on every GPU of the node.
        "engine": {"backend": "vllm", "gpu_memory_utilization": 0.45, "max_model_len": 16384,
                   "launcher": "accelerate", "accelerate_config": "zero3"},
    },
    # The paper's frontend setting: the Llama-3.1-8B policy with the released actor recipe; the paper's critic, a
    # Qwen2-VL-7B with a regression head reading the rendered pages (critic.kind=vlm: LoRA on its language model,
    # 8 epochs; README, Fidelity); a Qwen2-VL-72B vision simulator behind a vLLM server at $SWEET_SIMULATOR_URL
    # (up to 4,096 new tokens a reply, cut at 1,000 characters, as released); reward = CLIP ViT-B/32 similarity with
    # OpenAI's weights (the hub or its cache must be reachable); the released margin pair rule (family default) with
    # no cap on pairs per task; the released data size, 1,000 training tasks x 6 trajectories; win rates against
    # GPT-4o's pages (evaluated zero-shot as an `api:` agent: OPENAI_API_KEY, api.base_url).
    # Tasks: a local folder of WebSight-format records (train.jsonl / test.jsonl, `sweet` converts WebSight v0.2
    # rows into them); data/colbench_frontend is a placeholder path -- set tasks.source to your copy.
    # Hardware: as paper-backend (8x A100-80GB for training and sampling), plus 4-8 GPUs for the 72B vision server,
    # plus CPU cores for Chromium (frontend.pool_size pages render at once).
    "paper-frontend": {
        "experiment": "paper-frontend",
        "agent_view": "system",  # the instructions as a system message, as released
        "task_family": "frontend",
        # models.simulator is not used by the frontend family (frontend.simulator is); set alike for a clear config.
        "models": {"policy": LLAMA_8B, "critic_base": QWEN2_VL_7B, "device": "cuda",
                   "simulator": f"api:Qwen/Qwen2-VL-72B-Instruct@{SIMULATOR_URL_TOKEN}"},
        "tasks": {"source": "data/colbench_frontend", "n_train": 1000, "n_test": 500},
        "collect": {"k": 6, "max_turns": 10, "max_new_tokens": 2048, "sim_max_new_tokens": 4096, "temperature": 1.0,
                    "batch_episodes": 256},
        "pairs": {"max_pairs_per_task": 0},
        "critic": VLM_CRITIC,
        "candidates": {"n": 16, "temperature": 1.0, "max_new_tokens": 2048, "turn_fraction": 0.1,
                       "max_turns": 1_000_000, "pairs_per_turn": 4, "batch_size": 256},
        "actor": {**RELEASED_ACTOR, "max_length": 16384},
        "evaluate": {**RELEASED_EVAL, "max_new_tokens": 2048, "sim_max_new_tokens": 4096, "agents": ["api:gpt-4o"]},
        "frontend": {"simulator": f"api:Qwen/Qwen2-VL-72B-Instruct@{SIMULATOR_URL_TOKEN}",
                     "similarity": "clip:openai", "pool_size": 8, "sim_reply_chars": 1000,
                     "win_rate_baseline": "gpt-4o", "screenshot_max_height": 2880},
        "engine": {"backend": "vllm", "gpu_memory_utilization": 0.45, "max_model_len": 32768,
                   "launcher": "accelerate", "accelerate_config": "zero3"},
    },
}
PAPER_PROFILES["paper"] = PAPER_PROFILES["paper-backend"]  # the name earlier runs and docs use
# paper-backend with the critic of the paper's equations: Bradley-Terry on the sum of per-turn mean log-ratios (Eq. 2-3;
# the ranking's reference also sees c) plus the NLL term (0.01); its own experiment folder and results table.
PAPER_PROFILES["paper-eq"] = {**PAPER_PROFILES["paper-backend"], "experiment": "paper-eq",
                              "critic": {**PAPER_PROFILES["paper-backend"]["critic"], "variant": "paper",
                                         "nll_coef": 0.01}}


PROFILES: dict[str, dict[str, Any]] = {
    # The default: Qwen2.5-Coder-0.5B follows the answer protocol; sized for <=30 min on 2 CPU cores. A 0.5B policy
    # rarely passes every test, so pairs use the margin rule and RFT keeps trajectories passing at least one test.
    # Sampling goes through llama.cpp where it is installed (`make` builds it); without it, transformers, warned.
    "tiny": {"engine": {"backend": "llamacpp"}, "pairs": {"rule": "margin"},
             "candidates": {"n": 4, "temperature": 0.7}, "actor": {"rft_min_reward": 0.1}},
    # The learning study: the lite tier, where a 0.5B agent can win by asking (the simulator states each hidden
    # decision in plain words). Sized so `sweet run --profile laptop` fits 90 minutes on 2 CPU cores with the llama.cpp
    # engine (stage times in the README): training a 0.5B LoRA costs ~12 s per trajectory pair here, so the data are
    # small. Several sampled trajectories per task and 2 episodes per held-out task, so a paired comparison with
    # zero-shot can tell. Sampling at 0.7, not the paper's 1.0: at 1.0 the 0.5B agent broke the answer protocol in
    # 35 of 80 sampled answers. The critic's base is the 0.5B (the default): the 135M tied it on a 10-pair validation
    # split (0.700 both) but ranked a run's held-out pairs at chance (0.474 vs 0.694; README, "Does it learn?").
    # Two actor epochs (run E's): with one (run D) the actor did not fit its DPO pairs, and on 50 unused train tasks
    # (a validation file) E's actor beat D's by +5.7 [+0.7, +11.0] points. Timed from nothing with two critic epochs,
    # 40 candidate turns and 3 episodes on each of the 50 held-out tasks (run F, README), the profile took 166 min on
    # a 2-core AMX machine, most of it llama.cpp generation, which runs near that CPU's limits (~200 prompt and ~100
    # generated tokens/s, batched). So: one critic epoch (F's critic ranked held-out pairs at chance after two) and 20
    # candidate turns; with 2 episodes on each of 40 held-out tasks that took 51.5 min (run G). 3 episodes on all 50
    # and 8 on 12 of them for the curve took 81 min (run H) and 98 min (run I, same code path, a slower day), so the
    # evaluation was 2 episodes on each of the 50 held-out tasks and 8 on 8 of them for the critic's best-of-N curve
    # (N = 1, 2, 4, 8; not in the table): about 17 min less than I's, by I's stage times.
    # Since run M (README, "Does it learn?"): run L's recipe. The last-turn reply begun with the answer marker and a
    # code fence (backend.answer_prefill), so a dialogue that asked still ends with code: in run K2's collection the
    # episodes that ask then scored 0.240 against 0.100 (run J, without it: 0.049 vs 0.100). And a candidate holding
    # unmarked code before the last turn is never a DPO pair's chosen action (candidates.unmarked_code=rank_last):
    # K2's actor learned that form and gained nothing; L, the same data with that rule, gained +12.0 [+4.0, +20.8]
    # points on the validation file. A trained actor that asks runs all three turns of every episode (K2's
    # evaluation took 64 min), so the evaluation is one episode per held-out task (paired over the 50 tasks) and the
    # curve 8 episodes on 2 of them.
    # One pair per forward, two per optimiser step (the defaults' global batch of 2, the same update): on 2 cores a
    # step of 2 pairs padded to 923 tokens took 51 s, the same pairs one by one 18.5 s (README, CPU inference engine).
    "laptop": {
        "experiment": "laptop",
        "engine": {"backend": "llamacpp"},  # without llama-server (no `cpu-engine` extra) it falls back to hf, warned
        "tasks": {"source": "bundled:lite", "n_train": 32, "n_test": 50},
        "pairs": {"rule": "margin", "min_margin": 0.1, "max_pairs_per_task": 2},
        "collect": {"k": 4, "max_turns": 3, "max_new_tokens": 192, "sim_max_new_tokens": 48, "temperature": 0.7},
        "critic": {"epochs": 1, "max_length": 1024, "batch_size": 1, "grad_accum": 2},
        # Candidates long enough to hold a whole function: cut-off candidates taught the micro actor prose.
        "candidates": {"n": 6, "temperature": 0.7, "max_new_tokens": 192, "max_turns": 20,
                       "unmarked_code": "rank_last"},
        "actor": {"epochs": 2, "max_length": 1024, "batch_size": 1, "grad_accum": 2, "rft_min_reward": 0.5},
        "evaluate": {"max_turns": 3, "max_new_tokens": 192, "sim_max_new_tokens": 48, "temperature": 0.7,
                     "n_samples": 1, "diagnostic_samples": 8, "diagnostic_tasks": 2,
                     "best_of_n": 4, "best_of_n_temperature": 0.7},
        "backend": {"answer_prefill": True},
    },
    # End-to-end tests: SmolLM2-135M, 3 tasks, 2 turns, a few tokens.
    "micro": {
        "experiment": "micro",
        "models": {"policy": SMOLLM2_135M, "simulator": SMOLLM2_135M, "critic_base": SMOLLM2_135M},
        "tasks": {"source": "bundled:easy", "n_train": 3, "n_test": 2},
        "pairs": {"rule": "margin"},
        "collect": {"k": 4, "max_turns": 2, "max_new_tokens": 48, "sim_max_new_tokens": 16},
        "critic": {"epochs": 1, "max_length": 384, "save_steps": 2},
        "candidates": {"n": 4, "temperature": 0.7, "max_new_tokens": 16, "max_turns": 4},
        "actor": {"max_length": 384, "save_steps": 2, "rft_min_reward": 0.1},
        "evaluate": {"max_turns": 1, "max_new_tokens": 48, "sim_max_new_tokens": 16},
    },
}
# The paper's settings for GPU machines (below); `paper` is an alias of paper-backend.


# Settings a task family needs whatever the profile; applied after the profile, before --set overrides.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "backend": {},
    # The released frontend rule: every pair of a task's trajectories whose similarities differ by at least 0.1.
    "frontend": {"pairs": {"rule": "margin", "min_margin": 0.1},
                 "actor": {"rft_min_reward": 0.0, "rft_best_per_task": True}},
}
# Per (profile, family): sizes that keep a frontend run in budget (pages are ~900 tokens, code answers ~150).
PROFILE_FAMILY: dict[tuple[str, str], dict[str, Any]] = {
    ("tiny", "frontend"): {
        "tasks": {"n_train": 6, "n_test": 8},
        "collect": {"max_new_tokens": 448, "batch_episodes": 24},
        # One pair per step: at 2,560 tokens, two pairs' activations (4 sequences) went past 23 GB on a CPU.
        "critic": {"max_length": 2048, "batch_size": 1, "grad_accum": 2},
        "candidates": {"max_new_tokens": 448, "max_turns": 6, "batch_size": 16},
        "actor": {"max_length": 1536, "batch_size": 1, "grad_accum": 2},
        "evaluate": {"max_new_tokens": 448},
    },
    # SmolLM2-135M never writes HTML (0 of 12 samples), so the frontend smoke run's policy is Qwen-0.5B with short
    # pages; the critic stays SmolLM2 (it re-tokenises the text it scores).
    ("micro", "frontend"): {
        "models": {"policy": QWEN_CODER_05B},
        "tasks": {"source": "bundled", "n_train": 2, "n_test": 2}, "pairs": {"min_margin": 0.01},
        "collect": {"k": 3, "max_new_tokens": 160}, "critic": {"max_length": 1536},
        "candidates": {"max_new_tokens": 32, "max_turns": 3}, "actor": {"max_length": 1024},
        "evaluate": {"max_new_tokens": 160},
    },
}
PROFILES.update(PAPER_PROFILES)
