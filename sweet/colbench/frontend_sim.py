"""Frontend human simulators: each sees the agent's page of this turn (or nothing) and the reference page, no history.

* `VisionSimulator` — the paper's: a multimodal model behind an OpenAI-compatible endpoint (Qwen2-VL-72B in the
  paper) gets its instructions and the two screenshots as data URLs, in the released environment's order, and
  answers at temperature 0.
* `DomDiffSimulator` ("dom-diff") — the offline default, because no vision model runs on these machines. It is not
  a vision model: it compares the two rendered DOMs (`sweet.render.dom`: computed colours, fonts, sizes,
  positions and texts of the main blocks) and states the largest differences in plain sentences, most important
  first. Deterministic, like a temperature-0 simulator.
"""

from __future__ import annotations

import base64
import colorsys
import difflib
import re

from sweet.colbench.frontend import NO_PAGE

SIM_INSTRUCTIONS = (
    "You are a human user who asked an agent to build a web page. You will see the page the agent drew (if any) and "
    "the page you actually want. In a few short sentences of plain English, tell the agent the most important "
    "differences to fix (layout, colours, texts, sizes, spacing), as a user would describe them. Never write code, "
    "and never mention that you can see a target image.")
AGENT_PAGE = "Below is the design the agent is referring to."
REFERENCE_PAGE = "Below is the ground truth design that the human user wants."


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


class VisionSimulator:
    """A vision-language model over the API client (`api:<model>[@url]`); replies are cut by the environment."""
    needs_dom = False

    def __init__(self, chat, instructions: str = SIM_INSTRUCTIONS):
        self.chat, self.instructions = chat, instructions
        self.name = f"vision:{getattr(chat, 'name', chat)}"

    def message(self, agent_png: bytes | None, reference_png: bytes) -> list[dict]:
        content = [{"type": "text", "text": self.instructions}]
        if agent_png:
            content += [{"type": "text", "text": AGENT_PAGE}, {"type": "image_url", "image_url": {"url": data_url(agent_png)}}]
        else:
            content.append({"type": "text", "text": NO_PAGE})
        content += [{"type": "text", "text": REFERENCE_PAGE},
                    {"type": "image_url", "image_url": {"url": data_url(reference_png)}}]
        return [{"role": "user", "content": content}]

    def reply(self, items, max_new_tokens: int) -> list:
        """items: (task, this turn's RenderResult or None, reference RenderResult)."""
        convs = [self.message(getattr(r, "png", None), ref.png) for _, r, ref in items]
        return self.chat.generate(convs, max_new_tokens, 0.0)

    def close(self) -> None:
        close = getattr(self.chat, "close", None)
        if close:
            close()


# ---- the offline DOM-diff simulator ------------------------------------------------------------------------------
_RGB = re.compile(r"rgba?\(\s*([\d.]+)[,\s]+([\d.]+)[,\s]+([\d.]+)(?:[,\s/]+([\d.]+))?\s*\)")
_HUES = [(15, "red"), (40, "orange"), (55, "amber"), (70, "yellow"), (90, "lime"), (150, "green"), (175, "teal"),
         (195, "cyan"), (225, "blue"), (250, "indigo"), (280, "purple"), (320, "pink"), (345, "rose"), (360, "red")]
_KIND = {"h1": "main heading", "h2": "heading", "h3": "heading", "h4": "heading", "a": "link", "button": "button",
         "img": "image", "nav": "navigation bar", "header": "header", "footer": "footer", "li": "list item",
         "p": "paragraph", "input": "input field", "section": "section", "span": "text"}


def parse_rgb(css: str) -> tuple[float, float, float] | None:
    m = _RGB.search(css or "")
    if not m or (m.group(4) is not None and float(m.group(4)) == 0):
        return None
    return tuple(float(m.group(i)) for i in (1, 2, 3))


def colour_name(css: str) -> str:
    """A plain name for a CSS colour: 'white', 'dark gray', 'light blue', 'red'..."""
    rgb = parse_rgb(css)
    if rgb is None:
        return "transparent"
    h, l, _ = colorsys.rgb_to_hls(*(c / 255 for c in rgb))
    chroma = (max(rgb) - min(rgb)) / 255  # Tailwind's grays are faintly blue: judge colourfulness, not saturation
    if chroma < 0.12 or l > 0.96 or l < 0.06:
        return ("white" if l > 0.93 else "light gray" if l > 0.7 else "gray" if l > 0.4 else
                "dark gray" if l > 0.12 else "black")
    if 20 <= h * 360 <= 45 and l < 0.4:
        return "brown"
    hue = next(name for top, name in _HUES if h * 360 <= top)
    return f"light {hue}" if l > 0.75 else f"dark {hue}" if l < 0.36 else hue


def _dist(a: str, b: str) -> float:
    x, y = parse_rgb(a), parse_rgb(b)
    if x is None or y is None:
        return 0.0 if x == y else 255.0
    return sum((p - q) ** 2 for p, q in zip(x, y)) ** 0.5


def _kind(b: dict) -> str:
    return _KIND.get(b["tag"], "block")


def _label(b: dict) -> str:
    return f"the {_kind(b)} \"{b['text'][:40]}\"" if b.get("text") else f"the {_kind(b)}"


def _align(b: dict, width: float) -> str:
    centre = b["x"] + b["w"] / 2
    if b.get("text_align") == "center" or (b["w"] < 0.8 * width and abs(centre - width / 2) < 0.05 * width):
        return "centered"
    return "on the right" if b["x"] > width / 2 else "on the left"


def _match(agent: list[dict], ref: list[dict]) -> list[tuple[dict, dict | None]]:
    """Each reference text block with the agent block whose text matches best (ratio >= 0.6), or None."""
    free = [b for b in agent if b.get("text")]
    out = []
    for r in ref:
        if not r.get("text"):
            continue
        best, score = None, 0.6
        for b in free:
            s = 1.0 if b["text"].lower() == r["text"].lower() else difflib.SequenceMatcher(
                None, b["text"].lower(), r["text"].lower()).ratio()
            if s >= score:
                best, score = b, s
        if best is not None:
            free.remove(best)
        out.append((r, best))
    return out


def describe_target(ref: dict, limit: int = 5) -> list[str]:
    """What the wanted page looks like, when the agent has shown nothing yet."""
    page, blocks = ref["page"], ref["blocks"]
    lines = [f"I'd like a page with a {colour_name(page['background'])} background."]
    width = max(page.get("width") or 1, 1)
    for b in sorted((b for b in blocks if b.get("text")), key=lambda b: -b["font_size"] * len(b["text"]) ** 0.5)[:limit - 1]:
        bg = colour_name(b["background"])
        lines.append(f"It has {_label(b)} in {colour_name(b['color'])} {_size(b['font_size'])} text"
                     f"{' on ' + bg if bg != colour_name(page['background']) else ''}, {_align(b, width)}.")
    return lines


def _size(px: float) -> str:
    return "very large" if px >= 36 else "large" if px >= 24 else "medium" if px >= 18 else "small" if px < 14 else "regular"


def describe_differences(agent: dict | None, ref: dict, limit: int = 6) -> str:
    """Plain sentences about the largest differences between the agent's page and the wanted page."""
    if agent is None:
        return " ".join(["I can't see any design from you yet."] + describe_target(ref, limit - 1))
    notes: list[tuple[float, str]] = []  # (importance, sentence)
    page_a, page_r = agent["page"], ref["page"]
    width = max(page_r.get("width") or 1, 1)
    if _dist(page_a["background"], page_r["background"]) > 40:
        notes.append((1e9, f"The page background should be {colour_name(page_r['background'])}, not "
                           f"{colour_name(page_a['background'])}."))
    for r, a in _match(agent["blocks"], ref["blocks"]):
        area = max(r["w"] * r["h"], 1) * (2.0 if r["tag"] in ("h1", "h2", "nav", "header", "button") else 1.0)
        if a is None:
            notes.append((area * 1.5, f"My page also has {_label(r)} ({colour_name(r['color'])} {_size(r['font_size'])}"
                                      f" text, {_align(r, width)}); yours is missing it."))
            continue
        if _dist(a["background"], r["background"]) > 60:
            notes.append((area * 1.2, f"Behind {_label(r)} the background should be {colour_name(r['background'])}, "
                                      f"not {colour_name(a['background'])}."))
        if _dist(a["color"], r["color"]) > 60:
            notes.append((area, f"Make {_label(r)} {colour_name(r['color'])} instead of {colour_name(a['color'])}."))
        ratio = (a["font_size"] or 1) / (r["font_size"] or 1)
        if ratio < 0.8 or ratio > 1.25:
            notes.append((area * abs(ratio - 1), f"{_label(r)[0].upper() + _label(r)[1:]} should be "
                                                 f"{'bigger' if ratio < 1 else 'smaller'} ({_size(r['font_size'])} text)."))
        if (int(a["font_weight"] or 400) >= 600) != (int(r["font_weight"] or 400) >= 600):
            notes.append((area * 0.5, f"{_label(r)[0].upper() + _label(r)[1:]} should "
                                      f"{'be bold' if int(r['font_weight'] or 400) >= 600 else 'not be bold'}."))
        if _align(a, width) != _align(r, width):
            notes.append((area * 0.6, f"Put {_label(r)} {_align(r, width)}."))
        if a["text"] != r["text"] and a["text"].lower() != r["text"].lower():
            notes.append((area * 0.4, f"The text \"{a['text'][:40]}\" should read \"{r['text'][:60]}\"."))
    matched = {id(a) for _, a in _match(agent["blocks"], ref["blocks"]) if a is not None}
    extra = [b for b in agent["blocks"] if b.get("text") and id(b) not in matched]
    for b in extra[:3]:
        notes.append((b["w"] * b["h"] * 0.3, f"I don't want {_label(b)} on my page."))
    ha, hr = page_a.get("height") or 0, page_r.get("height") or 0
    if hr and abs(ha - hr) > 0.3 * hr:
        notes.append((width * abs(ha - hr) * 0.2, f"My page is {'longer' if hr > ha else 'shorter'} than yours."))
    if not notes:
        return "That looks very close to what I want."
    notes.sort(key=lambda n: -n[0])
    return " ".join(s for _, s in notes[:limit])


class DomDiffSimulator:
    """The offline simulator: compares rendered DOMs, not images (see the module docstring)."""
    needs_dom = True
    name = "dom-diff"

    def __init__(self, limit: int = 6):
        self.limit = limit

    def reply(self, items, max_new_tokens: int = 0) -> list[str]:
        """items: (task, this turn's RenderResult or None, reference RenderResult); `max_new_tokens` is unused."""
        out = []
        for _, r, ref in items:
            if ref is None or getattr(ref, "dom", None) is None:
                out.append("I can't describe the page I want right now.")
                continue
            agent_dom = getattr(r, "dom", None) if r is not None and getattr(r, "png", None) else None
            out.append(describe_differences(agent_dom, ref.dom, self.limit))
        return out


def make_simulator(spec: str, load_chat=None):
    """'dom-diff' (offline default) or 'api:<vision model>[@url]' (the paper's vision simulator). `load_chat(spec)`
    builds the chat backend of an API spec; the caller passes it, so environments never import the agents."""
    if spec == "dom-diff":
        return DomDiffSimulator()
    if spec.startswith("api:") and len(spec) > 4:
        if load_chat is None:
            raise ValueError(f"frontend simulator {spec!r} needs a chat backend: pass load_chat")
        return VisionSimulator(load_chat(spec))
    raise ValueError(f"unknown frontend simulator {spec!r}: use 'dom-diff' or 'api:<vision model>[@url]'")
