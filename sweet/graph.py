"""The method graph, declared once: which stages each method runs and whose outputs each stage reads.

`flows/full.py` spells the same wiring out as code, to read like the paper's Figure 2; tests/test_method_graph.py
runs that flow for every method and checks it calls exactly these stages with exactly these inputs. Everything
else — single-stage reruns, `sweet status`, `sweet run --stage`, the per-stage Prefect flows — is derived from here.
"""

from __future__ import annotations

from sweet.config import METHODS

STAGE_NAMES = ("generate_tasks", "collect_trajectories", "build_preference_pairs", "train_critic",
               "sample_and_rank_candidates", "train_actor", "evaluate")
# Older names of a stage, still accepted wherever a stage is named (stored runs, scripts): the actor stage also
# runs the baselines' SFT, so "DPO" left its name.
ALIASES = {"train_dpo_actor": "train_actor"}

# stage -> the stages whose output folders it takes, in argument order.
SWEET: dict[str, tuple[str, ...]] = {
    "generate_tasks": (),
    "collect_trajectories": ("generate_tasks",),
    "build_preference_pairs": ("collect_trajectories",),
    "train_critic": ("build_preference_pairs",),
    "sample_and_rank_candidates": ("collect_trajectories", "train_critic"),
    "train_actor": ("sample_and_rank_candidates",),
    "evaluate": ("generate_tasks", "train_actor"),
}
BASELINES: dict[str, dict[str, tuple[str, ...]]] = {
    "zero_shot": {"generate_tasks": (), "evaluate": ("generate_tasks",)},
    "rft": {"generate_tasks": (), "collect_trajectories": ("generate_tasks",),
            "train_actor": ("collect_trajectories",), "evaluate": ("generate_tasks", "train_actor")},
    "mt_dpo": {"generate_tasks": (), "collect_trajectories": ("generate_tasks",),
               "build_preference_pairs": ("collect_trajectories",), "train_actor": ("build_preference_pairs",),
               "evaluate": ("generate_tasks", "train_actor")},
    "best_of_n": {"generate_tasks": (), "collect_trajectories": ("generate_tasks",),
                  "build_preference_pairs": ("collect_trajectories",), "train_critic": ("build_preference_pairs",),
                  "evaluate": ("generate_tasks", "train_critic")},
}
# SWEET-RL's critic ablations run all seven stages, like SWEET-RL.
GRAPHS: dict[str, dict[str, tuple[str, ...]]] = {m: BASELINES.get(m, SWEET) for m in METHODS}
# Every run of the full flow also evaluates the initial policy on the same tasks (its "before" row; cached once).
BEFORE = "zero_shot"


def graph(method: str) -> dict[str, tuple[str, ...]]:
    """The stages `method` runs, in order, each with the stages it reads."""
    if method not in GRAPHS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    return GRAPHS[method]


def canonical(stage: str) -> str:
    """A stage's current name (an alias resolved); an unknown name is an error that lists the known ones."""
    stage = ALIASES.get(stage, stage)
    if stage not in STAGE_NAMES:
        raise ValueError(f"unknown stage {stage!r}; choose from {', '.join(STAGE_NAMES)}")
    return stage
