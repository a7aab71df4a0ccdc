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
            "sweet.stages.collect")

GENERATE = Stage("generate_tasks", generate_tasks, ("tasks", "api.base_url"),
                 ("sweet.stages.generate", "sweet.colbench.tasks", "sweet.colbench.official", "sweet.colbench.taskgen"))
COLLECT = Stage("collect_trajectories", collect_trajectories,
                ("models.policy", "models.simulator", "api.base_url", "collect"), _ROLLOUT + ("sweet.colbench.official",))
PAIRS = Stage("build_preference_pairs", build_preference_pairs, ("pairs",), ("sweet.stages.pairs",))
CRITIC = Stage("train_critic", train_critic, ("models.critic_base", "critic"),
               ("sweet.stages.critic", "sweet.algos.critic", "sweet.algos.dialogue"))
CANDIDATES = Stage("sample_and_rank_candidates", sample_and_rank_candidates, ("models.policy", "candidates"),
                   ("sweet.stages.candidates", "sweet.algos.critic", "sweet.algos.actor", "sweet.agents.hf"))
ACTOR = Stage("train_dpo_actor", train_dpo_actor, ("models.policy", "actor"),
              ("sweet.stages.actor", "sweet.algos.actor", "sweet.algos.dialogue"))
EVALUATE = Stage("evaluate", evaluate, ("models.policy", "models.simulator", "api.base_url", "evaluate"),
                 _ROLLOUT + ("sweet.stages.evaluate",))

STAGES = [GENERATE, COLLECT, PAIRS, CRITIC, CANDIDATES, ACTOR, EVALUATE]
BY_NAME = {s.name: s for s in STAGES}

# What each stage reads: the wiring of flows/full.py, as data, so a single stage can find its stored inputs.
INPUTS: dict[str, tuple[str, ...]] = {
    "generate_tasks": (),
    "collect_trajectories": ("generate_tasks",),
    "build_preference_pairs": ("collect_trajectories",),
    "train_critic": ("build_preference_pairs",),
    "sample_and_rank_candidates": ("collect_trajectories", "train_critic"),
    "train_dpo_actor": ("sample_and_rank_candidates",),
    "evaluate": ("generate_tasks", "train_dpo_actor"),
}


def plan(cfg) -> dict[str, str]:
    """Every stage's output folder for this config, computed without running anything."""
    from sweet.pipeline import stage_dir

    dirs: dict[str, str] = {}
    for s in STAGES:
        dirs[s.name] = str(stage_dir(s, cfg, tuple(dirs[i] for i in INPUTS[s.name])))
    return dirs
