"""The ColBench task families behind one interface, so the stages never branch on `cfg.task_family`.

A `Family` says how to load its task pool, rebuild a task from a stored `tasks` row, start an episode, run a
rollout, and build what plays the user (backend: a chat model; frontend: a `FrontendEnv` of renderer, page
similarity and simulator). Environments never import the agents: whatever needs a chat model gets `load_chat`, a
callable `spec -> chat backend` that the stage passes in (as `frontend_sim.make_simulator` takes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sweet.colbench import backend, frontend
from sweet.colbench.frontend_tasks import FrontendTask
from sweet.colbench.tasks import Task
from sweet.store import read_rows

LoadChat = Callable[[str], object]


@dataclass(frozen=True)
class Family:
    name: str
    load_pool: Callable[[object], list]  # cfg -> every task of `tasks.source` (both splits)
    task_from_row: Callable[[dict], object]  # a `tasks` row -> the family's task
    episode_cls: type  # (task, sample_idx, max_turns, mode=...) -> an episode
    rollout_fn: Callable  # (episodes, policy, simulator, **rollout settings) -> episodes
    # (cfg, load_chat, policy or None) -> what the rollout takes as `simulator`; `policy` is given when the policy
    # may play the user too (the same plain checkpoint), so no second model is loaded.
    simulator_fn: Callable[[object, LoadChat, object], object]

    def read_tasks(self, tasks_dir: str | Path, split: str) -> list:
        """The tasks of one split of a generate stage's `tasks.parquet`, in file order."""
        return [self.task_from_row(r) for r in read_rows(Path(tasks_dir) / "tasks.parquet") if r["split"] == split]

    def episode(self, task, sample_idx: int, max_turns: int, mode: str = "multi_turn", scoring: str = "strict",
                sim_view: str = "chat", agent_view: str = "user", prefill: bool = False):
        """`scoring`: the sandbox's rules (`evaluate.scoring`); `sim_view`: how the simulator sees the dialogue
        (`backend.simulator_view`); `agent_view`: where the agent's instructions go (`agent_view`). A family without
        tests ignores the first, one whose simulator reads no dialogue (frontend: it compares pages) the second.
        `prefill`: begin the last turn's answer for the agent (`backend.answer_prefill`; the backend family only)."""
        return self.episode_cls(task, sample_idx, max_turns, mode=mode, scoring=scoring, sim_view=sim_view,
                                agent_view=agent_view, prefill=prefill)

    def rollout(self, episodes: list, policy, simulator, **kw) -> list:
        return self.rollout_fn(episodes, policy, simulator, **kw)

    def simulator(self, cfg, load_chat: LoadChat, policy=None):
        return self.simulator_fn(cfg, load_chat, policy)


# ---- backend: Python functions, a chat model plays the user -------------------------------------------------------
def _backend_pool(cfg) -> list:
    from sweet.colbench.sources import load_tasks
    return load_tasks(cfg.tasks.source, first_n_test=cfg.tasks.first_n_test)


def _backend_simulator(cfg, load_chat: LoadChat, policy=None):
    return policy if policy is not None else load_chat(cfg.models.simulator)


# ---- frontend: web pages, rendered and compared -------------------------------------------------------------------
def _frontend_pool(cfg) -> list:
    from sweet.colbench.frontend_tasks import load_frontend_tasks
    return load_frontend_tasks(cfg.tasks.source)


def _frontend_task(row: dict) -> FrontendTask:
    return FrontendTask(**{k: row[k] for k in ("task_id", "split", "problem_description", "ground_truth")})


def frontend_env(cfg, load_chat: LoadChat) -> frontend.FrontendEnv:
    """Renderer + page similarity + simulator of a frontend run (one browser per stage)."""
    from sweet.colbench.frontend_sim import make_simulator
    from sweet.colbench.similarity import make_similarity

    f = cfg.frontend
    return frontend.FrontendEnv(frontend_renderer(cfg), make_similarity(f.similarity),
                                make_simulator(f.simulator, load_chat), f.sim_reply_chars)


def frontend_renderer(cfg):
    """The page renderer of a frontend run, from `cfg.frontend` (one Chromium with `pool_size` pages)."""
    from sweet.render import Renderer

    f = cfg.frontend
    # A page that fails to render gives no screenshot (scored as a black image, as the official evaluation does).
    return Renderer(pool_size=f.pool_size, viewport=(f.viewport_width, f.viewport_height), timeout_s=f.timeout_s,
                    max_height=f.screenshot_max_height, javascript=f.javascript,
                    executable_path=f.chromium or None, blank_on_failure=False)


def _frontend_simulator(cfg, load_chat: LoadChat, policy=None) -> frontend.FrontendEnv:
    return frontend_env(cfg, load_chat)  # the simulator sees pages, never the policy's model


FAMILIES: dict[str, Family] = {}


def register(fam: Family) -> Family:
    FAMILIES[fam.name] = fam
    return fam


register(Family("backend", _backend_pool, lambda row: Task(**row), backend.Episode, backend.rollout,
                _backend_simulator))
register(Family("frontend", _frontend_pool, _frontend_task, frontend.FrontendEpisode, frontend.rollout,
                _frontend_simulator))


def family(cfg_or_name) -> Family:
    """The family of a config (`cfg.task_family`) or of a name."""
    name = cfg_or_name if isinstance(cfg_or_name, str) else cfg_or_name.task_family
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown task family {name!r}; known: {', '.join(FAMILIES)}") from None
