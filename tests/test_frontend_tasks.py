"""Frontend ColBench tasks: the bundled page set, the loaders and the WebSight v0.2 conversion."""
import itertools
import json
import re
from pathlib import Path

import pytest

from sweet.colbench.frontend_tasks import (
    PLACEHOLDER_IMAGE, FrontendTask, bundled_path, convert_websight, html_problems, load_frontend_tasks,
    replace_image_urls)

ROOT = Path(__file__).resolve().parents[1]
SIM = Path(__file__).resolve().parent / "data" / "frontend_sim"
TAILWIND = '<link href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" rel="stylesheet">'
VENDORED_CSS = ROOT / "artifacts" / "vendor" / "tailwindcss@2.2.19" / "tailwind.min.css"
COLOUR_WORDS = re.compile(
    r"\b(red|blue|green|yellow|purple|pink|indigo|gr[ae]y|black|white|orange|teal|violet|brown|gold(en)?|silver|"
    r"colou?rs?|dark|light|pastel|navy|beige|cream|rose|amber|emerald)\b|#[0-9a-f]{3,8}\b|\brgba?\(", re.I)


@pytest.fixture(scope="module")
def bundled():
    return load_frontend_tasks("bundled")


# ------------------------------------------------------------------------------------------------ the bundled set
def test_bundled_shape(bundled):
    assert len(bundled) >= 40
    assert [t.task_id for t in bundled] == [f"fe-{i:03d}" for i in range(1, len(bundled) + 1)]
    tests = [i for i, t in enumerate(bundled) if t.split == "test"]
    assert len(tests) >= 10
    # spread through the file, not a block at the end
    assert tests[0] < len(bundled) // 4 and tests[-1] > 3 * len(bundled) // 4
    assert max(b - a for a, b in zip(tests, tests[1:])) <= 6


def test_bundled_pages_are_well_formed_tailwind_documents(bundled):
    for t in bundled:
        page = t.ground_truth
        assert html_problems(page) == [], (t.task_id, html_problems(page))
        assert page.lstrip().lower().startswith("<!doctype html>"), t.task_id
        assert TAILWIND in page, t.task_id
        assert 30 <= page.count("\n") <= 120, (t.task_id, page.count("\n"))
        # every image is the local placeholder: rendering needs no network beyond the stylesheet
        assert set(re.findall(r'<img[^>]*\bsrc="([^"]*)"', page)) <= {PLACEHOLDER_IMAGE}, t.task_id
        assert "url(" not in page, t.task_id


def test_bundled_pages_vary(bundled):
    # layouts: grids, flex rows, tables, forms, images; palettes: several background families
    def count(pattern):
        return sum(bool(re.search(pattern, t.ground_truth)) for t in bundled)
    assert count(r"grid-cols-") >= 15 and count(r"<table") >= 5 and count(r"<form") >= 8
    assert count(r"<img") >= 12 and count(r"bg-gradient-to-") >= 3
    body_bgs = {re.search(r'<body class="[^"]*?\bbg-(\w+)', t.ground_truth).group(1) for t in bundled
                if re.search(r'<body class="[^"]*?\bbg-(\w+)', t.ground_truth)}
    assert len(body_bgs) >= 8, body_bgs


def test_bundled_descriptions_leave_colours_out(bundled):
    for t in bundled:
        d = t.problem_description
        assert not COLOUR_WORDS.search(d), (t.task_id, COLOUR_WORDS.search(d).group(0))
        assert 60 <= len(d) <= 400 and 1 <= len(re.findall(r"[.!?](\s|$)", d)) <= 3, t.task_id
        assert "<" not in d and not re.search(r"\b(bg|text|border)-\w+-\d00\b", d), t.task_id


def _shingles(text: str, k: int = 5) -> set:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i:i + k]) for i in range(len(words) - k + 1)}


def test_bundled_pages_pairwise_distinct(bundled):
    sh = {t.task_id: _shingles(t.ground_truth) for t in bundled}
    for a, b in itertools.combinations(sh, 2):
        j = len(sh[a] & sh[b]) / len(sh[a] | sh[b])
        assert j < 0.6, (a, b, j)
    descs = [t.problem_description for t in bundled]
    assert len(set(descs)) == len(descs)


@pytest.mark.skipif(not VENDORED_CSS.exists(), reason="no vendored Tailwind 2.2.19 stylesheet under artifacts/vendor")
def test_bundled_classes_exist_in_tailwind_2(bundled):
    css = VENDORED_CSS.read_text(encoding="utf-8")
    known = {s.replace("\\", "") for s in re.findall(r"\.((?:[A-Za-z0-9_-]|\\.)+)", css)}
    assert "bg-teal-500" not in known  # v2's default palette: the check can fail
    missing = {c for t in bundled for cl in re.findall(r'class="([^"]*)"', t.ground_truth) for c in cl.split()
               if c not in known}
    assert not missing, sorted(missing)


# ------------------------------------------------------------------------------------------------ loading
def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


PAGE = "<html><head></head><body><p>hi</p></body></html>"


def test_load_jsonl_and_to_row(tmp_path):
    f = _write(tmp_path / "t.jsonl", [{"task_id": "a", "split": "train", "problem_description": "x", "ground_truth": PAGE},
                                      {"task_id": "b", "split": "test", "problem_description": "y", "ground_truth": PAGE}])
    tasks = load_frontend_tasks(str(f))
    assert [(t.task_id, t.split) for t in tasks] == [("a", "train"), ("b", "test")]
    assert tasks[0].to_row() == {"task_id": "a", "split": "train", "problem_description": "x", "ground_truth": PAGE}
    assert FrontendTask(**tasks[1].to_row()) == tasks[1]
    assert load_frontend_tasks() == load_frontend_tasks(bundled_path())


@pytest.mark.parametrize("nested", [False, True])
def test_load_official_folder_layout(tmp_path, nested):
    d = tmp_path / "frontend_tasks" if nested else tmp_path
    d.mkdir(exist_ok=True)
    _write(d / "train.jsonl", [{"problem_description": "x", "ground_truth": PAGE}] * 2)
    _write(d / "test.jsonl", [{"problem_description": "y", "ground_truth": PAGE}])
    tasks = load_frontend_tasks(tmp_path)
    assert [(t.task_id, t.split) for t in tasks] == [("train-0", "train"), ("train-1", "train"), ("test-0", "test")]


def test_folder_missing_split_file(tmp_path):
    _write(tmp_path / "train.jsonl", [{"problem_description": "x", "ground_truth": PAGE}])
    with pytest.raises(FileNotFoundError, match="test.jsonl"):
        load_frontend_tasks(tmp_path)


@pytest.mark.parametrize("rec, match", [
    ({"split": "train", "ground_truth": PAGE}, "row 1: missing field 'problem_description'"),
    ({"split": "train", "problem_description": "x"}, "row 1: missing field 'ground_truth'"),
    ({"split": "train", "problem_description": 3, "ground_truth": PAGE}, "row 1: field 'problem_description' must be str"),
    ({"split": "train", "problem_description": "  ", "ground_truth": PAGE}, "row 1: field 'problem_description' is empty"),
    ({"split": "train", "problem_description": "x", "ground_truth": "def f(): pass"}, "row 1: field 'ground_truth' must be an HTML page"),
    ({"split": "dev", "problem_description": "x", "ground_truth": PAGE}, "row 1: field 'split' must be 'train' or 'test'"),
    ({"problem_description": "x", "ground_truth": PAGE}, "row 1: field 'split'"),
    ({"task_id": "", "split": "test", "problem_description": "x", "ground_truth": PAGE}, "row 1: field 'task_id'"),
    ({"task_id": "ok", "split": "test", "problem_description": "x", "ground_truth": PAGE}, "row 1: duplicate task_id 'ok'"),
    ("[1, 2]", "row 1: expected a JSON object"),
    ("{not json", "row 1: not valid JSON"),
])
def test_bad_rows_name_file_row_field(tmp_path, rec, match):
    f = _write(tmp_path / "bad.jsonl", [{"task_id": "ok", "split": "train", "problem_description": "x",
                                         "ground_truth": PAGE}, rec])
    with pytest.raises(ValueError, match=re.escape(match)) as e:
        load_frontend_tasks(str(f))
    assert str(f) in str(e.value)


def test_missing_and_empty_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_frontend_tasks(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="holds no tasks"):
        load_frontend_tasks(str(_write(tmp_path / "empty.jsonl", [])))


# ------------------------------------------------------------------------------------------------ WebSight
def _websight():
    return [json.loads(line) for line in (SIM / "websight_v02_sample.jsonl").read_text().splitlines()]


def test_convert_websight_rewrites_every_image_url():
    rows = _websight()
    recs = convert_websight(rows)
    assert [set(r) for r in recs] == [{"problem_description", "ground_truth"}] * 3
    assert recs[0]["problem_description"] == rows[0]["llm_generated_idea"]
    for r in recs:
        assert "unsplash" not in r["ground_truth"] and "picsum" not in r["ground_truth"]
    a, b, c = (r["ground_truth"] for r in recs)
    # sizes the URLs name are kept for the renderer (WxH of source.unsplash.com, /W/H of picsum.photos)
    assert a.count('src="placeholder.png?w=300&h=200"') == 2 and "src='placeholder.png?w=300&h=200'" in a
    assert "background-image: url('placeholder.png?w=1200&h=400')" in a
    assert 'srcset="placeholder.png?w=800&h=600 1x, placeholder.png?w=1600&h=1200 2x"' in b
    assert "url('placeholder.png?w=1600&h=600') center" in b
    assert 'poster="placeholder.png?w=640&h=360"' in c
    assert replace_image_urls('<img src="https://img.example.com/cat.jpg">') == '<img src="placeholder.png">'
    assert replace_image_urls("<img alt=x src=https://a.example/400x300.jpg>") == \
        "<img alt=x src=placeholder.png?w=400&h=300>"
    assert replace_image_urls('<img src="a.jpg">', placeholder="p.png") == '<img src="p.png">'
    assert replace_image_urls('<img src="p.png?w=1&h=2">', placeholder="p.png") == '<img src="p.png?w=1&h=2">'
    # kept: the stylesheet, scripts, links, fonts and inline data: images
    assert "https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" in a
    assert '<script src="https://cdn.example.com/app.js">' in b and 'href="https://example.com/post"' in b
    assert "url(https://fonts.example.com/lora.woff2)" in b and 'src="data:image/png;base64,iVBORw0KGgo="' in b
    # nothing else changes, and a second pass is a no-op
    assert re.sub(r"https://(source\.unsplash\.com|picsum\.photos)\S*?(?=[\"') ])", "X", rows[2]["text"]) == \
        re.sub(r"placeholder\.png(\?w=\d+&h=\d+)?", "X", c)
    assert [replace_image_urls(r["ground_truth"]) for r in recs] == [r["ground_truth"] for r in recs]


def test_convert_websight_ids_and_loading(tmp_path):
    rows = _websight()
    recs = convert_websight(rows, start=100, split="train")
    assert [r["task_id"] for r in recs] == ["websight-000100", "websight-000101", "websight-000102"]
    tasks = load_frontend_tasks(str(_write(tmp_path / "ws.jsonl", recs)))
    assert [t.split for t in tasks] == ["train"] * 3
    # the official layout: no ids, no splits, in a folder
    _write(tmp_path / "train.jsonl", convert_websight(rows[:2]))
    _write(tmp_path / "test.jsonl", convert_websight(rows[2:], start=2))
    assert [t.task_id for t in load_frontend_tasks(tmp_path)] == ["train-0", "train-1", "test-0"]


def test_convert_websight_bad_rows():
    with pytest.raises(ValueError, match="WebSight row 7: missing or empty string field 'text'"):
        convert_websight([{"llm_generated_idea": "x"}], start=7)
    with pytest.raises(ValueError, match="'llm_generated_idea'"):
        convert_websight([{"text": "<html></html>", "llm_generated_idea": ""}])
    with pytest.raises(ValueError, match="split must be"):
        convert_websight(_websight()[:1], split="dev")


def test_html_problems_finds_structure_errors():
    assert html_problems("<html><head></head><body><div><p>x</div></body></html>")[0].startswith("</div> closes p")
    assert "<div> never closed" in html_problems("<html><head></head><body><div>")
    assert "no <body> element" in html_problems("<html><head></head></html>")
    assert html_problems(PAGE.replace("<head></head>", "<head><meta charset='utf-8'><br></head>")) == []
