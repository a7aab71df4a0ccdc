"""Frontend ColBench episodes: snippet extraction, the DOM-diff and vision simulators, the rollout and its reward,
with a real Chromium (skipped with the reason when none is found; scripts/setup_browser.sh provides one in CI)."""
from __future__ import annotations

import base64
import json

import pytest

from sweet.agents.api import ChatAPI
from sweet.colbench import frontend as F
from sweet.colbench import frontend_sim as S
from sweet import render as R
from sweet.colbench.frontend_tasks import FrontendTask, load_frontend_tasks
from sweet.colbench.similarity import PixelSimilarity

OK, WHY = R.browser_available()
needs_browser = pytest.mark.skipif(not OK, reason=f"no browser: {WHY}")
TW = '<link href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" rel="stylesheet">'
REF = (f"<html><head>{TW}</head><body class='bg-gray-100'><h1 class='text-4xl font-bold text-red-600 text-center'>"
       "Crumb &amp; Co.</h1><p class='text-gray-700'>Fresh bread every morning.</p>"
       "<button class='bg-blue-600 text-white px-4 py-2'>Order now</button></body></html>")
DRAFT = (f"<html><head>{TW}</head><body class='bg-white'><h1 class='text-xl text-blue-600'>Crumb &amp; Co.</h1>"
         "</body></html>")
TASK = FrontendTask("fe-test", "test", "A landing page for a bakery.", REF)


# ---- protocol pieces ---------------------------------------------------------------------------------------------
def test_extract_html_follows_the_official_rule_and_keeps_cut_pages():
    assert F.extract_html("Draft:\n<html lang='en'><body>x</body></html>\nThoughts?") == \
        "<html lang='en'><body>x</body></html>"
    assert F.extract_html("<body class='a'>only a body</body> trailing") == "<body class='a'>only a body</body>"
    # A page cut by the token limit still renders, as in a browser (a deviation the module docstring names).
    assert F.extract_html("I WANT TO ANSWER:\n```html\n<html><body><h1>cut") == "<html><body><h1>cut"
    assert F.extract_html("What colour should the header be?") is None


def test_episode_prompts_and_turn_limits():
    e = F.FrontendEpisode(TASK, 0, 3)
    # The marker is named when it is due (last-turn note), not up front: small models write it first thing.
    assert "<html>" in e.messages[0]["content"] and F.ANSWER_MARK not in e.messages[0]["content"]
    assert F.ANSWER_MARK in F.FrontendEpisode(TASK, 0, 1).messages[0]["content"]
    assert F.ANSWER_MARK in F.FrontendEpisode(TASK, 0, 3, mode="single_turn").messages[0]["content"]
    assert TASK.problem_description in e.messages[0]["content"] and REF not in e.messages[0]["content"]
    assert F.FrontendEpisode(TASK, 0, 5, mode="single_turn").max_turns == 1
    with pytest.raises(ValueError, match="between 1 and 10"):
        F.FrontendEpisode(TASK, 0, 11)


def test_colour_names():
    assert S.colour_name("rgb(255, 255, 255)") == "white"
    assert S.colour_name("rgb(220, 38, 38)") == "red"
    assert S.colour_name("rgb(37, 99, 235)") == "blue"
    assert S.colour_name("rgb(243, 244, 246)") == "white"
    assert S.colour_name("rgb(55, 65, 81)") == "dark gray"
    assert S.colour_name("rgba(0, 0, 0, 0)") == "transparent"
    assert S.colour_name("rgb(30, 58, 138)") == "dark blue"


def _block(tag, text, color, size=16, weight="400", bg="rgb(255, 255, 255)", x=0, y=0, w=400, h=40, align="start"):
    return {"tag": tag, "text": text, "depth": 1, "x": x, "y": y, "w": w, "h": h, "color": color, "background": bg,
            "font_size": size, "font_weight": weight, "font_family": "sans", "text_align": align}


def test_dom_diff_names_the_largest_differences():
    page = {"width": 1280, "height": 720, "background": "rgb(255, 255, 255)"}
    ref = {"page": dict(page, background="rgb(17, 24, 39)"),
           "blocks": [_block("h1", "Crumb & Co.", "rgb(220, 38, 38)", 36, "700", w=1280, h=60, align="center"),
                      _block("button", "Order now", "rgb(255, 255, 255)", bg="rgb(37, 99, 235)", y=100, w=120)]}
    agent = {"page": page, "blocks": [_block("h1", "Crumb & Co.", "rgb(37, 99, 235)", 20, "400", w=300, h=30),
                                      _block("p", "Lorem ipsum dolor", "rgb(0, 0, 0)", y=50)]}
    text = S.describe_differences(agent, ref, limit=10)
    assert text.startswith("The page background should be black")  # the page background comes first
    assert "red instead of blue" in text and "bigger" in text
    assert 'button "Order now"' in text and "missing" in text
    assert "Lorem ipsum" in text  # a block the user does not want
    assert "<" not in text  # never code
    assert S.describe_differences(ref, ref) == "That looks very close to what I want."
    nothing = S.describe_differences(None, ref)
    assert nothing.startswith("I can't see any design from you yet.") and "Crumb & Co." in nothing


def test_vision_simulator_sends_two_data_url_images_at_temperature_zero(openai_server):
    openai_server.responder = lambda req: "Make the header red. " * 200  # long: the environment cuts it
    png = R.solid_png(4, 4, (255, 0, 0))
    ref = R.RenderResult(png, None, 4, 4, 0.0)
    sim = S.VisionSimulator(ChatAPI("vl-model", openai_server.base_url, api_key="k"))
    env = F.FrontendEnv(renderer=None, similarity=None, simulator=sim)
    env._refs[TASK.task_id] = ref
    e = F.FrontendEpisode(TASK, 0, 3)
    e.messages += [{"role": "assistant", "content": "earlier turn"}, {"role": "user", "content": "earlier reply"}]
    replies = env.replies([(e, ref), (e, None)], max_new_tokens=64)
    assert all(len(r) == F.SIM_REPLY_CHARS for r in replies)
    # Requests run concurrently: tell them apart by how many images they carry.
    first, second = sorted((r["json"] for r in openai_server.requests),
                           key=lambda b: -sum(c["type"] == "image_url" for c in b["messages"][0]["content"]))
    for body in (first, second):
        assert body["temperature"] == 0.0 and len(body["messages"]) == 1  # no dialogue history
        content = body["messages"][0]["content"]
        assert content[0]["text"] == S.SIM_INSTRUCTIONS and "earlier" not in str(content)
        urls = [c["image_url"]["url"] for c in content if c["type"] == "image_url"]
        assert all(u.startswith("data:image/png;base64,") for u in urls)
        assert base64.b64decode(urls[-1].split(",", 1)[1]) == png  # the reference comes last
    assert len([c for c in first["messages"][0]["content"] if c["type"] == "image_url"]) == 2
    texts = [c["text"] for c in second["messages"][0]["content"] if c["type"] == "text"]
    assert F.NO_PAGE in texts and len([c for c in second["messages"][0]["content"] if c["type"] == "image_url"]) == 1
    sim.close()


def test_make_simulator_refuses_unknown_specs():
    assert isinstance(S.make_simulator("dom-diff"), S.DomDiffSimulator)
    with pytest.raises(ValueError, match="dom-diff"):
        S.make_simulator("Qwen/Qwen2-VL-72B-Instruct")


# ---- rollouts in a real browser ------------------------------------------------------------------------------------
class ScriptedPolicy:
    """Stands for the agent LM: returns the next scripted response for each conversation, by turn."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, conversations, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        self.calls.append([list(c) for c in conversations])
        return [self.script[c[0]["content"]][sum(m["role"] == "assistant" for m in c)] for c in conversations]


@pytest.fixture(scope="module")
def env():
    with R.Renderer(pool_size=2, timeout_s=20) as r:
        yield F.FrontendEnv(r, PixelSimilarity(), S.DomDiffSimulator())


@needs_browser
def test_rollout_renders_each_snippet_and_scores_the_last_page(env):
    tasks = [FrontendTask(f"t{i}", "test", f"Bakery page number {i}.", REF) for i in range(3)]
    eps = [F.FrontendEpisode(t, 0, 3) for t in tasks]
    script = {
        eps[0].messages[0]["content"]: [f"Here is a first draft:\n{DRAFT}", f"{F.ANSWER_MARK}\n{REF}"],
        eps[1].messages[0]["content"]: ["What should the page look like?", f"{DRAFT}", f"Final try:\n{DRAFT}"],
        eps[2].messages[0]["content"]: ["Which colours?", "And the fonts?", "Thanks."],
    }
    policy, finished = ScriptedPolicy(script), []
    F.rollout(eps, policy, env, max_new_tokens=64, sim_max_new_tokens=64, temperature=0.0, on_done=finished.extend)
    exact, draft, nothing = eps
    assert len(finished) == 3 and all(e.done for e in eps)
    assert exact.n_turns == 2 and exact.answer == REF and exact.reward > 0.99 and exact.error is None
    assert draft.n_turns == 3 and draft.answer == DRAFT  # turn limit: the last snippet is the answer
    assert nothing.answer is None and nothing.error.startswith("no page")
    assert exact.reward > draft.reward > nothing.reward  # a black image is farthest from a light page
    assert {e.metric for e in eps} == {"pixel-ssim+edges+colour-256"}
    # The simulator saw the agent's draft on turn 1 and said what differs; nothing shown -> it describes the target.
    reply = exact.messages[2]["content"]
    assert exact.messages[2]["role"] == "user" and "red" in reply and "<" not in reply
    assert nothing.messages[2]["content"].startswith("I can't see any design from you yet.")
    assert len(nothing.messages[2]["content"]) <= F.SIM_REPLY_CHARS
    # Turn 2 of `draft` had a snippet, turn 1 did not: the simulator judged this turn's page only.
    assert not draft.messages[4]["content"].startswith("I can't see")
    assert F.LAST_TURN_NOTE in draft.messages[4]["content"]


@needs_browser
def test_bundled_reference_pages_render_and_describe(env):
    tasks = load_frontend_tasks()[:2]
    refs = env.references(tasks)
    assert all(r.png and r.dom and len(r.dom["blocks"]) >= 5 for r in refs)
    text = S.describe_differences(None, refs[0].dom)
    assert len(text) > 40 and "<" not in text
    # The two pages differ, so the simulator has something to say about one judged against the other.
    assert S.describe_differences(refs[1].dom, refs[0].dom) != "That looks very close to what I want."


@needs_browser
def test_cli_evaluate_frontend_with_api_agents_and_win_rate(tmp_path, openai_server, capsys):
    """`sweet evaluate --set task_family=frontend`: two API agents (the stub stands for e.g. GPT-4o), one that
    answers with the reference page and one with a draft; the table gives similarity and win rate vs the second."""
    from sweet.cli import main

    tasks = tmp_path / "pages.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": f"p{i}", "split": "test", "ground_truth": REF,
                                         "problem_description": f"A bakery page {i}."}) + "\n" for i in range(2)))
    openai_server.responder = lambda req: f"{F.ANSWER_MARK}\n" + (REF if req["model"] == "good" else DRAFT)
    sets = [f"artifacts_dir={tmp_path}", f"mlflow_uri=sqlite:///{tmp_path}/m.db", "task_family=frontend",
            f"tasks.source={tasks}", f"api.base_url={openai_server.base_url}", "frontend.win_rate_baseline=draft"]
    argv = ["evaluate", "--profile", "micro", "--agent", "api:good", "--agent", "api:draft"]
    assert main(argv + [x for s in sets for x in ("--set", s)]) == 0
    out = capsys.readouterr().out
    assert "similarity (pixel-ssim+edges+colour-256)" in out and "win rate vs draft" in out
    good = next(line for line in out.splitlines() if line.startswith("| good |"))
    assert "| 100.0 [" in good  # the reference page wins on every task
