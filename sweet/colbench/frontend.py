"""Frontend ColBench episodes: the agent writes HTML, a simulator that sees both pages tells it what differs.

The protocol of the released environment (`HumanDesignInteractionEnv`):
* each agent turn may carry one HTML snippet (`<html ...>...</html>`, else `<body ...>...</body>`); it is rendered,
  and the latest rendered snippet is the episode's answer;
* the simulator sees no dialogue history: only its instructions, the page the agent rendered *this turn* (or the
  note that it rendered nothing) and the reference page; it replies at temperature 0, cut at 1,000 characters;
* the episode ends when the agent writes `I WANT TO ANSWER:` or after `max_turns` agent turns;
* reward = image similarity of the final page and the reference page (CLIP in the paper; the metric's name is
  stored with every score). No snippet at all is scored as a black image, as in the official evaluation.
One deviation: a snippet cut off by the token limit (`<html` without `</html>`) is still rendered, as a browser
would; the official regex would drop it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

from sweet import progress
from sweet.chat import GenerationFailure
from sweet.colbench.backend import (ANSWER_MARK, GENERATION_FAILED, Episode, add_replies, finish_turn,
                                    generation_failed)
from sweet.colbench.frontend_tasks import FrontendTask

SIM_REPLY_CHARS = 1000
TAILWIND_LINK = '<link href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" rel="stylesheet">'

# The answer marker is named only in the last-turn note: a 0.5B model given it up front writes it first thing and
# never shows a draft.
AGENT_PROMPT = (
    "You are a web developer building one web page for a user with HTML and Tailwind CSS classes. The description "
    "below is short; the user has a precise design in mind (layout, colours, sizes, texts). You have at most "
    "{max_turns} turns. In each turn, show the user a draft: one complete page in a single <html>...</html> block "
    f"(load Tailwind with {TAILWIND_LINK}), optionally with a short question. The user sees your draft rendered "
    "next to the page they want and tells you what differs; improve the draft each turn.\n\n"
    "Description:\n{problem}"
)
SINGLE_TURN_PROMPT = (
    "You are a web developer building one web page for a user with HTML and Tailwind CSS classes. You cannot ask "
    "questions: write the complete page now, choosing layout and colours that fit the description.\n"
    f"Write {ANSWER_MARK} followed by the page in a single <html>...</html> block (load Tailwind with {TAILWIND_LINK}), "
    "and nothing after it.\n\nDescription:\n{problem}"
)
LAST_TURN_NOTE = f"\n\n(This is your last turn: reply with {ANSWER_MARK} and your final <html>...</html> page.)"
NO_PAGE = "The agent did not provide any visualization."


@dataclass
class FrontendEpisode(Episode):
    """A backend `Episode`'s turn bookkeeping with the frontend's prompts; `answer` is the latest rendered snippet."""
    task: FrontendTask
    metric: str = ""
    answer_render: object = None  # RenderResult of `answer` (not stored in rows)
    # success / tests_passed stay False / 0: no page "succeeds"; kept for one row schema across families.
    PROMPT: ClassVar[str] = AGENT_PROMPT
    SINGLE_PROMPT: ClassVar[str] = SINGLE_TURN_PROMPT
    LAST_NOTE: ClassVar[str] = LAST_TURN_NOTE
    SCORED_BY_TESTS: ClassVar[bool] = False  # reward = page similarity; `scoring` stays ''


_HTML = re.compile(r"<html\b.*?</html\s*>", re.I | re.S)
_BODY = re.compile(r"<body\b.*?</body\s*>", re.I | re.S)
_OPEN = re.compile(r"<html\b|<body\b|<!doctype html", re.I)


def extract_html(text: str) -> str | None:
    """The turn's HTML snippet: the first <html>...</html>, else <body>...</body>, else an unterminated page."""
    for pattern in (_HTML, _BODY):
        m = pattern.search(text)
        if m:
            return m.group(0)
    m = _OPEN.search(text)
    return text[m.start():].split("```", 1)[0].strip() if m else None


class FrontendEnv:
    """What the frontend episodes need besides the policy: a renderer, a page similarity and a simulator.
    Reference pages are rendered once per task and kept."""

    def __init__(self, renderer, similarity, simulator, sim_reply_chars: int = SIM_REPLY_CHARS):
        self.renderer, self.similarity, self.simulator = renderer, similarity, simulator
        self.sim_reply_chars = sim_reply_chars
        self._refs: dict[str, object] = {}

    def references(self, tasks: list[FrontendTask]) -> list:
        todo = {t.task_id: t.ground_truth for t in tasks if t.task_id not in self._refs}
        if todo:
            for tid, res in zip(todo, self.renderer.render_many(list(todo.values()), dom=self.simulator.needs_dom)):
                self._refs[tid] = res
        return [self._refs[t.task_id] for t in tasks]

    def render(self, htmls: list[str]) -> list:
        return self.renderer.render_many(htmls, dom=self.simulator.needs_dom) if htmls else []

    def score(self, episodes: list[FrontendEpisode]) -> None:
        """Similarity of each final page to its reference; an episode that ended on a failed generation keeps 0."""
        todo = [e for e in episodes if not (e.error or "").startswith(GENERATION_FAILED)]
        refs = self.references([e.task for e in todo])
        pairs = [(_png(e.answer_render), _png(r)) for e, r in zip(todo, refs)]
        for e, s in zip(todo, self.similarity.score_many(pairs) if pairs else []):
            e.reward = float(s)
            if e.answer is None:
                e.error = "no page: the agent never wrote an <html> snippet"
            elif getattr(e.answer_render, "error", None):
                e.error = f"page: {e.answer_render.error}"[:300]
        for e in episodes:
            e.metric = self.similarity.metric

    def replies(self, items: list[tuple[FrontendEpisode, object]], max_new_tokens: int) -> list:
        """One simulator reply per (episode, this turn's render or None)."""
        refs = self.references([e.task for e, _ in items])
        out = self.simulator.reply([(e.task, r, ref) for (e, r), ref in zip(items, refs)], max_new_tokens)
        return [r if r is None or isinstance(r, GenerationFailure) else (r.strip() or "I don't know.")[
            :self.sim_reply_chars] for r in out]

    def close(self) -> None:
        self.renderer.close()
        close = getattr(self.simulator, "close", None)
        if close:
            close()


def _png(res):
    """The screenshot of a render, or None (scored as a black image) when nothing could be rendered."""
    return getattr(res, "png", None) or None


class PageScreens:
    """Screenshots of the pages that texts hold, for a critic that reads them (`critic.kind=vlm`): called with texts
    (agent actions, a reference page), it returns one PNG per text, None where a text holds no page
    (`extract_html`) or its page rendered nothing. Each distinct page is rendered once, in one pooled batch per
    call; with `folder`, the PNGs are also kept there by content hash (so another process, or a resumed stage,
    renders none again). The renderer is made by `make_renderer` the first time a page needs rendering."""

    def __init__(self, make_renderer: Callable[[], object], folder=None, keep: int = 4096):
        self.make_renderer, self.renderer = make_renderer, None
        self.folder, self.keep, self._pngs = (Path(folder) if folder else None), keep, {}

    def _file(self, html: str):
        return self.folder / f"{hashlib.sha256(html.encode()).hexdigest()[:32]}.png" if self.folder else None

    def __call__(self, texts: list[str]) -> list[bytes | None]:
        htmls = [extract_html(t) for t in texts]
        if len(self._pngs) > self.keep:
            self._pngs.clear()  # a bound on memory (one call's pages are always kept); what is on disk stays
        todo = []
        for h in dict.fromkeys(h for h in htmls if h is not None and h not in self._pngs):
            f = self._file(h)
            if f is not None and f.exists():
                self._pngs[h] = f.read_bytes() or None  # an empty file: the page rendered nothing
            else:
                todo.append(h)
        if todo:
            self.renderer = self.renderer or self.make_renderer()
            for h, res in zip(todo, self.renderer.render_many(todo)):
                self._pngs[h] = _png(res)
                if self.folder is not None:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    tmp = self._file(h).with_suffix(".tmp")
                    tmp.write_bytes(self._pngs[h] or b"")
                    tmp.replace(self._file(h))
        return [self._pngs.get(h) if h is not None else None for h in htmls]

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None


def rollout(episodes: list[FrontendEpisode], policy, env: FrontendEnv, *, max_new_tokens: int,
            sim_max_new_tokens: int, temperature: float, seed: int = 0,
            on_done: Callable[[list[FrontendEpisode]], None] | None = None, desc: str = "episodes"):
    """Advance all episodes turn by turn (one batched generate per turn, one batched render, one batched simulator
    call); `on_done` receives each turn's finished, scored episodes."""
    bar = progress.Bar(len(episodes), desc, "ep")  # the terminal, and any UI plugged in
    live = [e for e in episodes if not e.done]
    env.references([e.task for e in live])
    turn = 0
    while live:
        bar.set_postfix_str(f"turn {turn + 1}, {len(live)} live")
        final = [e.n_turns + 1 >= e.max_turns for e in live]
        actions = policy.generate([e.messages for e in live], max_new_tokens, temperature, seed=seed + turn)
        finished, shown = [], {}
        snippets = []
        for e, action, last in zip(live, actions, final):
            if generation_failed(e, "agent", action):
                finished.append(e)
                continue
            e.messages.append({"role": "assistant", "content": action})
            html = extract_html(action)
            if html is not None:
                snippets.append((e, html))
            if ANSWER_MARK.lower() in action.lower() or last:
                e.done = True
                finished.append(e)
        for (e, html), res in zip(snippets, env.render([h for _, h in snippets])):
            e.answer, e.answer_render, shown[id(e)] = html, res, res
        live = finish_turn(live, finished, env.score, on_done, bar)
        if live:
            live = add_replies(live, env.replies([(e, shown.get(id(e))) for e in live], sim_max_new_tokens), on_done, bar)
        turn += 1
    bar.close()
    return episodes
