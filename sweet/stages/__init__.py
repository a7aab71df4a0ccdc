"""The seven stages of the sweet-rl experiment, in the order of the paper's Figure 2.

Each is a pure function `fn(cfg, out_dir, *input_dirs) -> summary` plus what its outputs depend on: the config
keys and the code modules that go into its fingerprint.
"""

from sweet.pipeline import Stage
from sweet.stages.actor import train_dpo_actor
from sweet.stages.candidates import sample_and_rank_candidates
from sweet.stages.collect import collect_trajectories
from sweet.stages.critic import train_critic
from sweet.stages.evaluate import evaluate
from sweet.stages.generate import generate_tasks
from sweet.stages.pairs import build_preference_pairs

_ROLLOUT = ("sweet.colbench.backend", "sweet.colbench.sandbox", "sweet.agents.hf", "sweet.agents.api",
            "sweet.stages.collect", "sweet.colbench.frontend", "sweet.colbench.frontend_sim", "sweet.colbench.dom",
            "sweet.colbench.render", "sweet.colbench.similarity", "sweet.agents.vllm_backend")
# The frontend section only counts in a frontend run's fingerprints (see `pipeline.config_slice`).
_FAMILY = ("task_family", "frontend")
# vLLM samples differently from transformers (another RNG, other kernels): the backend is part of a rollout's identity.
_ENGINE = ("engine.backend",)
# How training is spread (counted only when launched: see `pipeline.COUNTS_ONLY_IF`): processes x per-device batch x
# grad_accum is the global batch, and ZeRO-3/FSDP set the precision.
_LAUNCH = ("engine.launcher", "engine.accelerate_config", "engine.num_processes")

GENERATE = Stage("generate_tasks", generate_tasks, ("task_family", "tasks", "api.base_url"),
                 ("sweet.stages.generate", "sweet.colbench.tasks", "sweet.colbench.official", "sweet.colbench.taskgen",
                  "sweet.colbench.frontend_tasks"))
COLLECT = Stage("collect_trajectories", collect_trajectories,
                ("models.policy", "models.simulator", "api.base_url", "collect") + _FAMILY + _ENGINE,
                _ROLLOUT + ("sweet.colbench.official",))
PAIRS = Stage("build_preference_pairs", build_preference_pairs, ("pairs",), ("sweet.stages.pairs",))
CRITIC = Stage("train_critic", train_critic, ("models.critic_base", "critic") + _LAUNCH,
               ("sweet.stages.critic", "sweet.algos.critic", "sweet.algos.value_head", "sweet.algos.dialogue",
                "sweet.algos.training", "sweet.launch", "sweet.train"))
CANDIDATES = Stage("sample_and_rank_candidates", sample_and_rank_candidates,
                   ("models.policy", "candidates") + _ENGINE,
                   ("sweet.stages.candidates", "sweet.algos.critic", "sweet.algos.scoring", "sweet.algos.value_head",
                    "sweet.algos.actor", "sweet.algos.training", "sweet.algos.vllm_scoring", "sweet.agents.hf",
                    "sweet.agents.vllm_backend"))
ACTOR = Stage("train_dpo_actor", train_dpo_actor, ("method", "models.policy", "actor") + _LAUNCH,
              ("sweet.stages.actor", "sweet.algos.actor", "sweet.algos.baselines", "sweet.algos.dialogue",
               "sweet.algos.training", "sweet.launch", "sweet.train"))
EVALUATE = Stage("evaluate", evaluate, ("method", "models.policy", "models.simulator", "api.base_url", "evaluate")
                 + _FAMILY + _ENGINE,
                 _ROLLOUT + ("sweet.stages.evaluate", "sweet.stages.best_of_n", "sweet.algos.scoring"))

STAGES = [GENERATE, COLLECT, PAIRS, CRITIC, CANDIDATES, ACTOR, EVALUATE]
BY_NAME = {s.name: s for s in STAGES}

# What each stage reads, per method: the wiring of flows/full.py, as data, so a single stage can find its stored
# inputs. SWEET-RL and its critic ablations use all seven stages; the baselines use a subset.
INPUTS: dict[str, tuple[str, ...]] = {
    "generate_tasks": (),
    "collect_trajectories": ("generate_tasks",),
    "build_preference_pairs": ("collect_trajectories",),
    "train_critic": ("build_preference_pairs",),
    "sample_and_rank_candidates": ("collect_trajectories", "train_critic"),
    "train_dpo_actor": ("sample_and_rank_candidates",),
    "evaluate": ("generate_tasks", "train_dpo_actor"),
}
_BASELINES: dict[str, dict[str, tuple[str, ...]]] = {
    "zero_shot": {"generate_tasks": (), "evaluate": ("generate_tasks",)},
    "rft": {"generate_tasks": (), "collect_trajectories": ("generate_tasks",),
            "train_dpo_actor": ("collect_trajectories",), "evaluate": ("generate_tasks", "train_dpo_actor")},
    "mt_dpo": {"generate_tasks": (), "collect_trajectories": ("generate_tasks",),
               "build_preference_pairs": ("collect_trajectories",), "train_dpo_actor": ("build_preference_pairs",),
               "evaluate": ("generate_tasks", "train_dpo_actor")},
    "best_of_n": {"generate_tasks": (), "collect_trajectories": ("generate_tasks",),
                  "build_preference_pairs": ("collect_trajectories",), "train_critic": ("build_preference_pairs",),
                  "evaluate": ("generate_tasks", "train_critic")},
}


def graph(method: str) -> dict[str, tuple[str, ...]]:
    """The stages `method` runs, in order, each with the stages it reads."""
    return _BASELINES.get(method, INPUTS)


def plan(cfg) -> dict[str, str]:
    """Every stage's output folder for this config (only the stages its method runs), without running anything."""
    from sweet.pipeline import stage_dir

    dirs: dict[str, str] = {}
    for name, inputs in graph(cfg.method).items():
        dirs[name] = str(stage_dir(BY_NAME[name], cfg, tuple(dirs[i] for i in inputs)))
    return dirs
