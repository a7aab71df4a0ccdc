"""Frontend ColBench tasks: WebSight-style records {problem_description, ground_truth: an HTML page}.

The bundled file (`data/frontend_tasks.jsonl`, pages written for sweet-rl, Tailwind v2) adds `task_id` and `split`.
A folder holding `train.jsonl`/`test.jsonl` (or `frontend_tasks/{train,test}.jsonl`, the official layout: no ids,
no splits) also loads; rows without a `task_id` get `<split>-<row>` as id.

`convert_websight` turns WebSight v0.2 rows ({llm_generated_idea, text, ...}) into task records. Every image URL
(`<img src>`, `<source src>`, `srcset`, `poster`, CSS `url(...)`) is rewritten to the local `placeholder.png`, which
the renderer fulfils, so rendering never needs the network; a size the URL names (`.../random/300x200/?cat`,
`picsum.photos/300/200`) is kept as `placeholder.png?w=300&h=200`, which the renderer honours. (The official
`replace_urls` points WebSight's `source.unsplash.com` URLs at one fixed picsum.photos image of the same size.)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

from sweet.store import iter_jsonl

BUNDLED = "bundled"
BUNDLED_FILE = "frontend_tasks.jsonl"
PLACEHOLDER_IMAGE = "placeholder.png"
SPLITS = ("train", "test")


@dataclass
class FrontendTask:
    task_id: str
    split: str
    problem_description: str
    ground_truth: str  # the reference HTML page

    def to_row(self) -> dict:
        return asdict(self)


def bundled_path() -> Path:
    return Path(str(resources.files("sweet.colbench") / "data" / BUNDLED_FILE))


def _parse(path: Path, row: int, rec: dict, split: str | None) -> FrontendTask:
    def need(name: str) -> str:
        if name not in rec:
            raise ValueError(f"{path}: row {row}: missing field {name!r}")
        if not isinstance(rec[name], str):
            raise ValueError(f"{path}: row {row}: field {name!r} must be str, got {type(rec[name]).__name__}")
        if not rec[name].strip():
            raise ValueError(f"{path}: row {row}: field {name!r} is empty")
        return rec[name]

    desc, page = need("problem_description"), need("ground_truth")
    if not re.search(r"<(html|body)[\s>]", page, re.I):
        raise ValueError(f"{path}: row {row}: field 'ground_truth' must be an HTML page (no <html> or <body> tag)")
    task_split = rec.get("split", split)
    if task_split not in SPLITS:
        raise ValueError(f"{path}: row {row}: field 'split' must be 'train' or 'test' (got {task_split!r})")
    task_id = rec.get("task_id", f"{task_split}-{row}")
    if not isinstance(task_id, (str, int)) or not str(task_id).strip():
        raise ValueError(f"{path}: row {row}: field 'task_id' must be a non-empty string (got {task_id!r})")
    return FrontendTask(str(task_id), task_split, desc, page)


def _folder_files(p: Path) -> list[tuple[Path, str]]:
    files = []
    for split in SPLITS:
        for rel in (f"{split}.jsonl", f"frontend_tasks/{split}.jsonl"):
            if (p / rel).is_file():
                files.append((p / rel, split))
                break
        else:
            raise FileNotFoundError(f"frontend task folder {p} has neither {split}.jsonl "
                                    f"nor frontend_tasks/{split}.jsonl")
    return files


def load_frontend_tasks(source: str | Path = BUNDLED) -> list[FrontendTask]:
    """Tasks of `source`: "bundled", a jsonl file (rows carry `split`), or a folder with train/test files."""
    if str(source) == BUNDLED:
        files = [(bundled_path(), None)]
    else:
        p = Path(source).expanduser()
        if p.is_dir():
            files = _folder_files(p)
        elif p.is_file():
            files = [(p, None)]
        else:
            raise FileNotFoundError(f"frontend task source {str(source)!r}: no such file or folder "
                                    f"(use 'bundled', a .jsonl file, or a folder holding train.jsonl and test.jsonl)")
    tasks, seen = [], {}
    for f, split in files:
        for row, rec in iter_jsonl(f):
            t = _parse(f, row, rec, split)
            if t.task_id in seen:
                raise ValueError(f"{f}: row {row}: duplicate task_id {t.task_id!r} (first at {seen[t.task_id]})")
            seen[t.task_id] = f"{f.name} row {row}"
            tasks.append(t)
    if not tasks:
        raise ValueError(f"frontend task source {str(source)!r} holds no tasks")
    return tasks


# ---------------------------------------------------------------------------------------------- WebSight conversion
_ATTR_URL = re.compile(r"""(\b(?:src|poster|data-src)\s*=\s*)(?:(["'])(.*?)\2|([^\s"'>]+))""", re.I | re.S)
_SRCSET = re.compile(r"""(\bsrcset\s*=\s*)(["'])(.*?)\2""", re.I | re.S)
_CSS_URL = re.compile(r"""url\(\s*(["']?)(.*?)\1\s*\)""", re.I | re.S)
_FONT = re.compile(r"\.(woff2?|ttf|otf|eot)(\?.*)?$", re.I)
_IMAGE_TAG = re.compile(r"<(img|source|video|input|image)\b[^>]*>", re.I | re.S)  # scripts and frames keep their src
_SIZE = re.compile(r"(?<![0-9])([0-9]{1,4})x([0-9]{1,4})(?![0-9])|picsum\.photos/(?:id/[0-9]+/)?([0-9]{1,4})/([0-9]{1,4})")


def _keep(url: str, placeholder: str) -> bool:
    url = url.strip()
    return not url or url.startswith(("data:", "#", placeholder))


def _local(url: str, placeholder: str) -> str:
    m = _SIZE.search(url)
    return f"{placeholder}?w={m.group(1) or m.group(3)}&h={m.group(2) or m.group(4)}" if m else placeholder


def replace_image_urls(html: str, placeholder: str = PLACEHOLDER_IMAGE) -> str:
    """Every image URL of `html` pointed at `placeholder`, keeping a size the URL names (data: URIs and font files
    in CSS url() are kept)."""
    def attr(a: re.Match) -> str:
        q, url = (a.group(2), a.group(3)) if a.group(2) else ("", a.group(4))
        return a.group(0) if _keep(url, placeholder) else f"{a.group(1)}{q}{_local(url, placeholder)}{q}"

    def tag(m: re.Match) -> str:
        t = _ATTR_URL.sub(attr, m.group(0))

        def srcset(a: re.Match) -> str:
            parts = []
            for cand in a.group(3).split(","):
                bits = cand.split()
                if bits and not _keep(bits[0], placeholder):
                    bits[0] = _local(bits[0], placeholder)
                parts.append(" ".join(bits))
            return f"{a.group(1)}{a.group(2)}{', '.join(parts)}{a.group(2)}"
        return _SRCSET.sub(srcset, t)

    html = _IMAGE_TAG.sub(tag, html)
    return _CSS_URL.sub(lambda m: m.group(0) if _keep(m.group(2), placeholder) or _FONT.search(m.group(2).strip())
                        else f"url('{_local(m.group(2), placeholder)}')", html)


def convert_websight(rows, start: int = 0, split: str | None = None) -> list[dict]:
    """WebSight v0.2 rows -> task records {problem_description, ground_truth[, task_id, split]}.

    `rows`: dicts with `llm_generated_idea` (the page's description) and `text` (its HTML); other fields (the
    screenshot `image`) are ignored. Ids are `websight-<start + i>` when `split` is given (then rows carry it too);
    without a split the records have the official layout (no id, no split). A bad row raises naming its index.
    """
    out = []
    for i, r in enumerate(rows):
        for name in ("llm_generated_idea", "text"):
            if not isinstance(r, dict) or not isinstance(r.get(name), str) or not r[name].strip():
                raise ValueError(f"WebSight row {start + i}: missing or empty string field {name!r}")
        rec = {"problem_description": r["llm_generated_idea"].strip(), "ground_truth": replace_image_urls(r["text"])}
        if split is not None:
            if split not in SPLITS:
                raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
            rec = {"task_id": f"websight-{start + i:06d}", "split": split, **rec}
        out.append(rec)
    return out


class _Checker(HTMLParser):
    """Collects the tags of a page and the void/unclosed-tag mismatches html.parser lets through."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.errors = [], set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'} at line {self.getpos()[0]}")
        else:
            self.stack.pop()


def html_problems(page: str) -> list[str]:
    """Structural problems of an HTML page (mismatched or unclosed tags, no <html>/<body>); [] when well-formed."""
    c = _Checker()
    c.feed(page)
    c.close()
    problems = list(c.errors) + [f"<{t}> never closed" for t in c.stack]
    problems += [f"no <{t}> element" for t in ("html", "head", "body") if t not in c.tags]
    return problems
