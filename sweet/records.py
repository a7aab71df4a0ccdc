"""The row types of the store: one dataclass per table the stages write to Parquet.

Writers build a record and write `dataclasses.asdict(record)`, so the field order here is the column order of the
Parquet files (and of the README's "The store" table, which tests/test_records.py checks against these classes).
Readers get plain dicts back (`store.read_rows`).

`tasks` rows are not here: they are the environments' own task types, `colbench.tasks.Task` (backend) and
`colbench.frontend_tasks.FrontendTask` (frontend, without test_cases), written with their `to_row()`; records sit
below the environments and know none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweet.store import dumps, loads


@dataclass
class Trajectory:
    """One collected episode (`trajectories`)."""
    traj_id: str  # "<task_id>__<sample_idx>"
    task_id: str
    sample_idx: int
    messages: str  # JSON list of chat messages, the agent's prompt first
    answer: str
    reward: float
    success: bool
    tests_passed: int
    tests_total: int
    n_turns: int
    error: str | None
    training_info: str  # the hidden reference c (code or HTML)
    metric: str  # what `reward` measures: "tests passed", or the page similarity's name
    scoring: str  # backend: the rules `reward` was scored by, "strict" or "official" (`evaluate.scoring`); frontend ""

    @classmethod
    def of_episode(cls, e, **extra):
        """The row of a finished `backend.Episode` or `frontend.FrontendEpisode`; `extra`: a subclass's fields."""
        return cls(traj_id=f"{e.task.task_id}__{e.sample_idx}", task_id=e.task.task_id, sample_idx=e.sample_idx,
                   messages=dumps(e.messages), answer=e.answer or "", reward=float(e.reward), success=bool(e.success),
                   tests_passed=int(e.tests_passed), tests_total=len(getattr(e.task, "test_cases", ())),
                   n_turns=e.n_turns, error=e.error, training_info=e.task.ground_truth,
                   metric=getattr(e, "metric", "") or "tests passed", scoring=getattr(e, "scoring", ""), **extra)


@dataclass
class EvalResult(Trajectory):
    """One evaluation episode (`eval_results`): the trajectory's columns, then which system and protocol."""
    method: str  # the system's name: zero_shot, sweet, ..., or an `evaluate.agents` name such as gpt-4o
    mode: str  # multi_turn, single_turn or oracle
    # Share of the task's hidden values (the lite tier's `decision_values`) that the final answer states; set by the
    # report where the task names them, else None.
    values_stated: float | None = None


@dataclass
class Turn:
    """One agent turn of a collected episode (`turns`)."""
    traj_id: str
    task_id: str
    turn: int
    message_index: int  # index of the agent's message in the trajectory's messages
    action: str
    observation: str | None  # the next message (the simulator's reply); None after the last turn
    is_final: bool


def turns_of(traj: dict) -> list[Turn]:
    """The agent turns of a `trajectories` row."""
    msgs = loads(traj["messages"])
    rows, t = [], 0
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        obs = msgs[i + 1]["content"] if i + 1 < len(msgs) else None
        rows.append(Turn(traj["traj_id"], traj["task_id"], t, i, m["content"], obs, obs is None))
        t += 1
    return rows


@dataclass
class Pair:
    """A trajectory preference pair of one task (`pairs`): chosen τ⁺ has the higher reward."""
    pair_id: str  # "<chosen traj_id>><rejected traj_id>"
    task_id: str
    chosen_traj_id: str
    rejected_traj_id: str
    chosen_reward: float
    rejected_reward: float
    chosen_messages: str  # JSON
    rejected_messages: str  # JSON
    training_info: str


@dataclass
class Candidate:
    """One sampled action for an offline turn, with its critic score (`candidates`)."""
    turn_id: str  # "<traj_id>__t<turn>"
    traj_id: str
    task_id: str
    turn: int
    cand_idx: int
    text: str
    score: float
    history: str  # JSON: the conversation before the action


@dataclass
class DpoPair:
    """A per-turn chosen/rejected action pair for DPO (`dpo_pairs`)."""
    turn_id: str
    task_id: str
    prompt: str  # JSON: the history
    chosen: str
    rejected: str
    chosen_score: float
    rejected_score: float


# Store table -> its record (`tasks` are the environments' task types: see the module docstring).
RECORDS: dict[str, type] = {"trajectories": Trajectory, "turns": Turn, "pairs": Pair, "candidates": Candidate,
                            "dpo_pairs": DpoPair, "eval_results": EvalResult}
