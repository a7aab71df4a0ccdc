"""Backend ColBench episodes: an agent and a human simulator, advanced in lockstep.

Every turn, one batched generate call serves all live episodes' agents, then one serves all their simulators.
An episode ends when the agent writes `I WANT TO ANSWER:` or at the turn limit (the last response is then the
answer). Answers are scored in the sandbox, in child processes, never in this process.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from sweet import progress
from sweet.chat import GenerationFailure, prompt_length
from sweet.sandbox import SCORINGS, evaluate_many, strip_code_fences
from sweet.colbench.tasks import Task

ANSWER_MARK = "I WANT TO ANSWER:"
SIM_REPLY_CHARS = 400

# The instructions go in the first user message, before the task: small instruction-tuned models follow a
# protocol stated there more reliably than one stated in a system prompt. `agent_view='system'` (AGENT_VIEWS) splits
# every prompt at its last paragraph, the task, into a system message and a user message, the released layout.
AGENT_PROMPT = (
    "You are helping a user write one Python function. The task description below leaves out details that only the "
    "user knows (exact rules, thresholds, formats). You have at most {max_turns} turns. In each turn write EITHER "
    "one short clarifying question (one sentence, no code) OR your final answer. Ask about unclear details first; "
    "your last turn must be the final answer.\n"
    f"A final answer starts with the line {ANSWER_MARK} followed by the complete function in a ```python block, "
    "and nothing after it.\n\n"
    "Task:\n{problem}"
)

SIM_SYSTEM = (
    "You are the user who asked an agent for a Python function. Your hidden code below is exactly the function you "
    "want; the agent cannot see it.\n"
    "Reply to the agent's latest message in at most two short sentences of plain English, stating the concrete "
    "rules, numbers or formats from your code that answer it. Never write code. If your code does not answer the "
    "question, say \"I don't know\".\n\n"
    "Task given to the agent:\n{problem}\n\nYour hidden code:\n{code}"
)
# Tasks that state their hidden values in plain words (`Task.decisions`, the lite tier) list them after the code: a
# 0.5B simulator misreads code it is shown (asked the fine for 3 days late on `0.25 * days` capped at 5 it said
# "$0.00"), but repeats a stated value: on 72 scripted questions about 40 lite train tasks it stated the asked value
# in 94% of replies with the decisions listed, 72% with the code alone (scripts/simulator_accuracy.py). Tasks
# without decisions get SIM_SYSTEM alone, unchanged.
SIM_DECISIONS = (
    "\n\nWhat you want, in plain words (the same rules as your code; give these exact values when the agent asks "
    "about them):\n{decisions}"
)
# Agent messages are cut in the simulator's view: a small simulator loses track of long pasted code, and it bounds
# the prompt a batched turn must prefill.
SIM_VIEW_CHARS = 600
# How the simulator is shown the dialogue (`backend.simulator_view`). 'chat': the turns as chat messages with the roles
# swapped (the agent is its user). 'transcript': one user message holding the dialogue as a transcript, the layout of
# the released environment (which also puts its instructions and the hidden code in that message; here they stay in
# the system message, as in 'chat'). Measured on the laptop profile: on 72 scripted questions about 40 lite train tasks
# the 0.5B simulator stated the asked value in 66 with 'chat' and 57 with 'transcript' (it answered the instructions
# or "the agent's last message" instead of the question; scripts/simulator_accuracy.py --view), so 'chat' is the CPU
# profiles' default and 'transcript' the paper profiles' (a 70B simulator, as released).
SIM_VIEWS = ("chat", "transcript")
SIM_TRANSCRIPT = (
    "The conversation so far (Agent is the one writing the function, You are the user):\n\n{transcript}\n\n"
    "Now write your reply to the agent's last message: at most two short sentences of plain English, no code, and "
    "do not repeat the agent's words."
)

# Asks for the body: with "the complete function" alone, 17 of 64 multi-turn episodes of a laptop collection ended
# with a bodiless answer (`I WANT TO ANSWER: def f(x):`, scripts/dialogue_failures.py).
LAST_TURN_NOTE = (f"\n\n(This is your last turn: write the line {ANSWER_MARK} and then the whole function, its body "
                  "included, in a ```python block.)")
# `backend.answer_prefill`: the last turn's reply is begun for the agent (the backend continues this text), so an
# episode that asked still ends with code. On run J's 128 collected laptop episodes, 48 of the 67 that asked ended
# without code that parses (the 0.5B agent echoed the simulator or asked again where it had to answer), so asking
# scored half of answering at once (0.049 vs 0.100) and every stage learned not to ask.
ANSWER_PREFILL = f"{ANSWER_MARK}\n```python\n"

# The paper's single-turn rows: the same task, but the agent cannot ask; its first response is the answer.
SINGLE_TURN_PROMPT = (
    "You are helping a user write one Python function. You cannot ask questions: write the complete function now, "
    "making reasonable assumptions about any detail the description leaves open.\n"
    f"Start your answer with the line {ANSWER_MARK} followed by the function in a ```python block, and nothing "
    "after it.\n\nTask:\n{problem}"
)
# The calibration's ceiling: single-turn with the hidden decisions written into the task (what asking could learn).
ORACLE_NOTE = "\n\nThe user has already told you these details:\n{decisions}"
MODES = ("multi_turn", "single_turn", "oracle")
# Errors of episodes that ended because a generation finally failed (API client); counted as "API failures".
GENERATION_FAILED = ("agent failed:", "simulator failed:")
MAX_TURNS = 10  # the paper's protocol: after 10 agent turns the last response is the answer
AGENT_VIEWS = ("user", "system")


def opening(template: str, view: str = "user", **fields) -> list[dict]:
    """An episode's first message(s) from a prompt template whose last paragraph is the task ("Task:\n{problem}").
    'user': one user message holding instructions and task (the CPU profiles'); 'system': the instructions as a
    system message and the task as the first user message, the layout of the released environment."""
    if view not in AGENT_VIEWS:
        raise ValueError(f"unknown agent view {view!r}; choose one of {AGENT_VIEWS}")
    if view == "user":
        return [{"role": "user", "content": template.format(**fields)}]
    head, task = template.rsplit("\n\n", 1)
    return [{"role": "system", "content": head.format(**fields)}, {"role": "user", "content": task.format(**fields)}]


def task_message(messages: list[dict]) -> str:
    """The message that states the task: the same text for every sample of a task, in either agent view."""
    return messages[prompt_length(messages) - 1]["content"]


@dataclass
class Episode:
    task: Task
    sample_idx: int
    max_turns: int
    messages: list[dict] = field(default_factory=list)
    answer: str | None = None
    done: bool = False
    reward: float = 0.0
    success: bool = False
    tests_passed: int = 0
    error: str | None = None
    mode: str = "multi_turn"
    scoring: str = "strict"  # the sandbox's rules for this episode's reward (`evaluate.scoring`)
    answer_text: str | None = None  # the answer as the released environment keeps it (scored under "official")
    sim_view: str = "chat"  # how `simulator_view` lays the dialogue out (`backend.simulator_view`, SIM_VIEWS)
    agent_view: str = "user"  # where the agent's instructions go (`agent_view`, AGENT_VIEWS; see `opening`)
    prefill: bool = False  # begin the last turn's reply with PREFILL (`backend.answer_prefill`; multi-turn only)
    # The family's prompts (class attributes, not fields): the frontend episode swaps these.
    PROMPT: ClassVar[str] = AGENT_PROMPT
    SINGLE_PROMPT: ClassVar[str] = SINGLE_TURN_PROMPT
    LAST_NOTE: ClassVar[str] = LAST_TURN_NOTE
    PREFILL: ClassVar[str] = ANSWER_PREFILL
    SCORED_BY_TESTS: ClassVar[bool] = True

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {MODES}")
        if not self.SCORED_BY_TESTS:
            self.scoring = ""  # no tests to score (frontend pages: `metric` names the similarity)
        elif self.scoring not in SCORINGS:
            raise ValueError(f"unknown scoring {self.scoring!r}; choose one of {SCORINGS}")
        if self.sim_view not in SIM_VIEWS:
            raise ValueError(f"unknown simulator view {self.sim_view!r}; choose one of {SIM_VIEWS}")
        if self.agent_view not in AGENT_VIEWS:
            raise ValueError(f"unknown agent view {self.agent_view!r}; choose one of {AGENT_VIEWS}")
        if not 1 <= self.max_turns <= MAX_TURNS:
            raise ValueError(f"max_turns must be between 1 and {MAX_TURNS} (the ColBench protocol), got {self.max_turns}")
        if self.mode in ("single_turn", "oracle"):
            self.max_turns = 1
        if not self.messages:
            problem = self.task.problem_description
            if self.mode == "oracle":
                decisions = getattr(self.task, "decisions", None)
                if not decisions:
                    raise ValueError(f"task {self.task.task_id}: mode 'oracle' needs the task's hidden decisions in "
                                     "plain words (the `decisions` field, as in the lite tier)")
                problem += ORACLE_NOTE.format(decisions="\n".join(f"- {d}" for d in decisions))
            template = self.PROMPT if self.mode == "multi_turn" else self.SINGLE_PROMPT
            self.messages = opening(template, self.agent_view, max_turns=self.max_turns, problem=problem)
            if self.mode == "multi_turn" and self.max_turns == 1:
                self.messages[-1]["content"] += self.LAST_NOTE

    @property
    def n_turns(self) -> int:
        return sum(m["role"] == "assistant" for m in self.messages)

    def agent_prompt(self, final: bool) -> list[dict]:
        """What the agent continues this turn: the dialogue, plus the begun answer on a prefilled last turn."""
        if final and self.prefill and self.mode == "multi_turn":
            return self.messages + [{"role": "assistant", "content": self.PREFILL}]
        return self.messages

    def simulator_view(self) -> list[dict]:
        """What the simulator reads: a system message with its instructions, the task and the hidden code, then the
        dialogue after the task prompt (the last-turn note removed, long agent messages cut), laid out by `sim_view`
        (see SIM_VIEWS): chat turns with the roles swapped, or one transcript message."""
        conv = [{"role": "system", "content": simulator_system(self.task)}]
        turns = []
        for m in self.messages[prompt_length(self.messages):]:
            content = m["content"].replace(self.LAST_NOTE, "")
            if m["role"] == "assistant" and len(content) > SIM_VIEW_CHARS:
                content = content[:SIM_VIEW_CHARS] + " [...]"
            turns.append((m["role"], content))
        if self.sim_view == "transcript":
            lines = "\n\n".join(f"{'Agent' if role == 'assistant' else 'You'}: {c}" for role, c in turns)
            return conv + [{"role": "user", "content": SIM_TRANSCRIPT.format(transcript=lines)}]
        return conv + [{"role": "user" if role == "assistant" else "assistant", "content": c} for role, c in turns]


def simulator_system(task) -> str:
    """The simulator's system prompt: the task and the hidden code, then the task's decisions in plain words, if any."""
    text = SIM_SYSTEM.format(problem=task.problem_description, code=task.ground_truth)
    decisions = getattr(task, "decisions", None)
    if decisions:
        text += SIM_DECISIONS.format(decisions="\n".join(f"- {d}" for d in decisions))
    return text


_CODE_START = re.compile(r"^(def |class |import |from \S+ import |@)", re.M)
_DEF = re.compile(r"\bdef \w+\s*\(")


def parses(code: str) -> bool:
    """Compiles to a syntax tree (never runs: the sandbox does that); hostile text can only fail to parse."""
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _drop_trailing_prose(code: str) -> str:
    """The longest head of `code` that parses and defines a function, cut before an unindented line (the prose, stray
    fence or notes a small model writes after unfenced code). Why: on 50 validation tasks 28 of 50 oracle answers
    (the hidden decisions given) were a right function followed by an explanation, all scored as syntax errors."""
    if parses(code):
        return code
    lines = code.splitlines()
    for cut in range(len(lines) - 1, 0, -1):
        if lines[cut].strip() and not lines[cut][0].isspace():
            head = "\n".join(lines[:cut]).rstrip()
            if _DEF.search(head) and parses(head):
                return head
    return code


def message_kind(text: str) -> str:
    """What an agent message does, by the protocol's surface: an answer (with the marker), a marker misspelt, code
    without the marker, a question, or prose. Used to read what a critic's ranking or a trained actor prefers."""
    if ANSWER_MARK in text:
        return "answer (marker)"
    if re.search(r"want to answer", text, re.I):
        return "marker misspelt"
    if "def " in text or "```" in text:
        return "code, no marker"
    return "question" if "?" in text else "prose"


def extract_code(text: str) -> str:
    """Unfenced code that parses before any fence, from the first line that starts Python code (else the first
    `def name(`), prose before and after it dropped (`_drop_trailing_prose`; a fence after such code is a stray
    closing one); else the first fenced block; else the text."""
    before = text.split("```", 1)[0]
    m = _CODE_START.search(before) or _DEF.search(before)
    if m:
        code = _drop_trailing_prose(before[m.start():].strip()).strip()
        # Else the `def` was prose naming the function, or a lone import line came first: the fence holds the code.
        if before == text or (parses(code) and _DEF.search(code)):
            return code
    return strip_code_fences(text).strip()


def extract_answer(text: str, final_turn: bool) -> str | None:
    """The code after the answer marker, or the whole last response when the turn limit is reached."""
    m = re.search(re.escape(ANSWER_MARK), text, flags=re.I)
    if m:
        return extract_code(text[m.end():])
    return extract_code(text) if final_turn else None


def released_answer(text: str) -> str:
    """What the released environment keeps as the answer: the text after the marker (up to a second one), else
    the whole response; its prose and fences are left for the scoring rules."""
    parts = re.split(re.escape(ANSWER_MARK), text, flags=re.I)
    return parts[1] if len(parts) > 1 else text


def clean_reply(text: str) -> str:
    text = text.strip() or "I don't know."
    return text[:SIM_REPLY_CHARS]


def score(episodes: list[Episode]) -> None:
    """Sandbox scores, by each episode's `scoring`; an episode that ended on an API failure keeps reward 0 and its
    error. "official" scores the answer as the released code did: the raw text after the marker (`answer_text`),
    prose and fences included; "strict" the extracted code (`answer`)."""
    todo = [e for e in episodes if e.error is None]
    for scoring in dict.fromkeys(e.scoring for e in todo):
        group = [e for e in todo if e.scoring == scoring]
        texts = [e.answer_text if scoring == "official" and e.answer_text is not None else e.answer or ""
                 for e in group]
        reports = evaluate_many([(a, e.task.ground_truth, e.task.test_cases) for a, e in zip(texts, group)],
                                scoring=scoring)
        for e, r in zip(group, reports):
            e.reward, e.success, e.tests_passed, e.error = r.reward, r.success, r.passed, r.error


def generation_failed(e: Episode, who: str, reply) -> bool:
    """A generation that finally failed (API client) ends the episode with reward 0, recorded, never dropped."""
    if not isinstance(reply, GenerationFailure) and reply is not None:
        return False
    e.done, e.error = True, f"{who} failed: {getattr(reply, 'reason', 'no reply')}"
    return True


def finish_turn(live: list, finished: list, score_fn, on_done, bar) -> list:
    """Score the episodes that ended this turn, hand them to `on_done`; returns those still going."""
    if finished:
        score_fn(finished)
        if on_done:
            on_done(finished)
        bar.update(len(finished))
    return [e for e in live if not e.done]


def add_replies(live: list, replies: list, on_done, bar) -> list:
    """Append each simulator reply (plus the last-turn note when due); a failed reply ends its episode unscored.
    Returns the episodes still going."""
    lost = []
    for e, reply in zip(live, replies):
        if generation_failed(e, "simulator", reply):
            lost.append(e)
            continue
        note = e.LAST_NOTE if e.n_turns + 1 >= e.max_turns else ""
        e.messages.append({"role": "user", "content": reply + note})
    if lost:
        if on_done:
            on_done(lost)
        bar.update(len(lost))
    return [e for e in live if not e.done]


def rollout(episodes: list[Episode], policy, simulator, *, max_new_tokens: int, sim_max_new_tokens: int,
            temperature: float, seed: int = 0, on_done: Callable[[list[Episode]], None] | None = None,
            desc: str = "episodes") -> list[Episode]:
    """Advance all episodes turn by turn; `on_done` receives each turn's finished (scored) episodes."""
    bar = progress.Bar(len(episodes), desc, "ep")  # the terminal, and any UI plugged in
    live = [e for e in episodes if not e.done]
    turn = 0
    while live:
        bar.set_postfix_str(f"turn {turn + 1}, {len(live)} live")
        final = [e.n_turns + 1 >= e.max_turns for e in live]
        actions = policy.generate([e.agent_prompt(last) for e, last in zip(live, final)], max_new_tokens, temperature,
                                  seed=seed + turn)
        finished = []
        for e, action, last in zip(live, actions, final):
            if generation_failed(e, "agent", action):
                finished.append(e)
                continue
            e.messages.append({"role": "assistant", "content": action})
            answer = extract_answer(action, last)
            if answer is not None:
                e.answer, e.answer_text, e.done = answer, released_answer(action), True
                finished.append(e)
        live = finish_turn(live, finished, score, on_done, bar)
        if live:
            # The simulator decodes greedily (temperature 0), as in the paper.
            replies = simulator.generate([e.simulator_view() for e in live], sim_max_new_tokens, 0.0)
            live = add_replies(live, [r if isinstance(r, GenerationFailure) or r is None else clean_reply(r)
                                      for r in replies], on_done, bar)
        turn += 1
    bar.close()
    return episodes
