"""The seven stages of the sweet-rl experiment, in the order of the paper's Figure 2.

Each is a pure function `fn(cfg, out_dir, *input_dirs) -> summary` plus the config keys its outputs depend on.
Which stages a method runs, and what each reads, is declared once in `sweet/graph.py`. A stage's code fingerprint
is the import closure of the function's module inside sweet/ (`sweet status --code` lists it).
"""

from sweet.pipeline import Stage
from sweet.stages.actor import train_actor
from sweet.stages.candidates import sample_and_rank_candidates
from sweet.stages.collect import collect_trajectories
from sweet.stages.critic import train_critic
from sweet.stages.evaluate import evaluate
from sweet.stages.generate import generate_tasks
from sweet.graph import ALIASES, STAGE_NAMES, canonical, graph  # noqa: F401  (re-exported)
from sweet.stages.pairs import build_preference_pairs

# Each family's section (backend: the simulator's view; frontend: rendering and similarity) counts only in that
# family's fingerprints (see `pipeline.COUNTS_ONLY_IF`).
_FAMILY = ("task_family", "backend", "frontend")
# Where the agent's instructions go (an episode's opening messages): what every rollout's policy reads.
_AGENT = ("agent_view",)
# vLLM samples differently from transformers (another RNG, other kernels): the backend is part of a rollout's identity.
# llama.cpp's slots batch requests together and cut each conversation at its slot's context: counted when it runs.
_ENGINE = ("engine.backend", "engine.llamacpp_parallel", "engine.llamacpp_ctx_per_slot")
# How training is spread (counted only when launched: see `pipeline.COUNTS_ONLY_IF`): processes x per-device batch x
# grad_accum is the global batch, and ZeRO-3/FSDP set the precision.
_LAUNCH = ("engine.launcher", "engine.accelerate_config", "engine.num_processes")
# bf16 autocast or float32 for torch work on the CPU (training, critic scoring); counted only on the CPU, resolved.
_PRECISION = ("models.cpu_precision",)

GENERATE = Stage("generate_tasks", generate_tasks, ("task_family", "tasks", "api.base_url"))
# Collection scores its episodes by evaluate.scoring (one rule for training rewards and evaluation); the evaluate
# stage has it through its whole section.
COLLECT = Stage("collect_trajectories", collect_trajectories,
                ("models.policy", "models.simulator", "api.base_url", "collect", "evaluate.scoring")
                + _AGENT + _FAMILY + _ENGINE)
PAIRS = Stage("build_preference_pairs", build_preference_pairs, ("pairs",))
CRITIC = Stage("train_critic", train_critic, ("models.critic_base", "critic") + _LAUNCH + _PRECISION)
CANDIDATES = Stage("sample_and_rank_candidates", sample_and_rank_candidates,
                   ("models.policy", "candidates") + _ENGINE + _PRECISION)
ACTOR = Stage("train_actor", train_actor, ("method", "models.policy", "actor") + _LAUNCH + _PRECISION)
EVALUATE = Stage("evaluate", evaluate, ("method", "models.policy", "models.simulator", "api.base_url", "evaluate")
                 + _AGENT + _FAMILY + _ENGINE + _PRECISION)

STAGES = [GENERATE, COLLECT, PAIRS, CRITIC, CANDIDATES, ACTOR, EVALUATE]
assert tuple(st.name for st in STAGES) == STAGE_NAMES
# Old names resolve too (a stored run or a script may still say train_dpo_actor).
BY_NAME = {s.name: s for s in STAGES} | {old: {s.name: s for s in STAGES}[new] for old, new in ALIASES.items()}


def plan(cfg) -> dict[str, str]:
    """Every stage's output folder for this config (only the stages its method runs), without running anything."""
    from sweet.pipeline import stage_dir

    dirs: dict[str, str] = {}
    for name, inputs in graph(cfg.method).items():
        dirs[name] = str(stage_dir(BY_NAME[name], cfg, tuple(dirs[i] for i in inputs)))
    return dirs
