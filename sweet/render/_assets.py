"""Tailwind and image assets for the renderer (sweet/render/__init__.py), and the PNG helpers it needs.

Split out of render.py so that the renderer module holds only the browser plumbing: everything here is plain
Python (no browser, no event loop): the local Tailwind stylesheet and the per-page subset of it, the rewrite of
Tailwind Play CDN script tags, and the placeholder images (sizes read from the URL, PNGs encoded here).
"""

from __future__ import annotations

import io
import logging
import re
import struct
import threading
import warnings
import zlib
from pathlib import Path

log = logging.getLogger("sweet.render")  # the package logger, whichever module logs

TAILWIND_VERSION = "2.2.19"
TAILWIND_URL = f"https://cdn.jsdelivr.net/npm/tailwindcss@{TAILWIND_VERSION}/dist/tailwind.min.css"
_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TAILWIND_CSS = _ROOT / "artifacts" / "vendor" / f"tailwindcss@{TAILWIND_VERSION}" / "tailwind.min.css"
PLACEHOLDER_GREY = (204, 204, 204)
PLACEHOLDER_DEFAULT = (320, 240)
PLACEHOLDER_MAX = 2000

_TAILWIND_CSS_URL = re.compile(
    r"^https?://(?:cdn\.jsdelivr\.net/npm/|unpkg\.com/|cdnjs\.cloudflare\.com/ajax/libs/)tailwindcss"
    r"(?:@[^/]*|/[0-9][^/]*)?/(?:dist/)?tailwind(?:\.min)?\.css(?:[?#].*)?$", re.I)
# The Play CDN (v3, JIT in the browser) and the v4 browser build: replaced by the local v2 stylesheet.
_TAILWIND_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//(?:cdn\.tailwindcss\.com|"
    r"(?:cdn\.jsdelivr\.net/npm|unpkg\.com)/@tailwindcss/browser)[^>]*>\s*</script\s*>", re.I)
_SIZE_PATTERNS = [
    re.compile(r"(?<![0-9])([0-9]{1,4})[x×]([0-9]{1,4})(?![0-9])"),  # 400x300 (placeholder services, unsplash)
    re.compile(r"/([0-9]{1,4})/([0-9]{1,4})(?:[/?#.]|$)"),  # picsum.photos/400/300, placekitten
]
_SIZE_QUERY_W = re.compile(r"[?&](?:w|width)=([0-9]{1,4})(?:&|$)")
_SIZE_QUERY_H = re.compile(r"[?&](?:h|height)=([0-9]{1,4})(?:&|$)")
_SQUARE = re.compile(r"picsum\.photos/(?:id/[0-9]+/)?([0-9]{1,4})(?:[/?#]|$)")


_CSS_TOKEN = re.compile(r"/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|[{}]", re.S)
_CSS_CLASS = re.compile(r"\.(-?(?:[_a-zA-Z]|[^\x00-\x7f]|\\[0-9a-fA-F]{1,6}\s?|\\[^\n0-9a-fA-F])"
                        r"(?:[\w-]|[^\x00-\x7f]|\\[0-9a-fA-F]{1,6}\s?|\\[^\n0-9a-fA-F])*)")
_CSS_ESCAPE = re.compile(r"\\([0-9a-fA-F]{1,6})\s?|\\(.)")
_SEL_NOISE = re.compile(r"\[[^\]]*\]|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'")
_HTML_TOKENS = re.compile(r"[^<>\"'`\s=]+")


def _css_unescape(ident: str) -> str:
    return _CSS_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)) if m.group(1) else m.group(2), ident)


def _split_selectors(prelude: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(prelude):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(prelude[start:i])
            start = i + 1
    out.append(prelude[start:])
    return out


class TailwindSubset:
    """The part of a compiled Tailwind stylesheet a page can use, as Tailwind's own purge does it: a rule is kept
    when, for one of its selectors, every class it names appears as a token anywhere in the page (class attributes,
    scripts, text); rules naming no class (the preflight, ``*`` variables) and at-rules other than @media
    (keyframes) are always kept; order is preserved.  So the page renders exactly as with the whole file, but the
    browser gets and parses ~1-5% of it (measured: the 2.9 MB file costs ~0.3 s of a ~0.45 s render here)."""

    def __init__(self, css: str):
        self.items: list[tuple[tuple[str, ...], str]] = []  # (enclosing @media/@supports preludes, rule text)
        self.always: list[int] = []
        self.by_class: dict[str, list[tuple[int, frozenset[str]]]] = {}
        self._parse(css, ())

    def _add(self, media: tuple[str, ...], prelude: str, body: str) -> None:
        idx = len(self.items)
        self.items.append((media, f"{prelude}{{{body}}}"))
        if prelude.lstrip().startswith("@"):
            self.always.append(idx)
            return
        for sel in _split_selectors(prelude):
            sel = _SEL_NOISE.sub("", sel)  # attribute values and strings name no class
            classes = frozenset(_css_unescape(c) for c in _CSS_CLASS.findall(sel))
            if not classes:
                self.always.append(idx)
                return
            self.by_class.setdefault(min(classes), []).append((idx, classes))

    def _parse(self, css: str, media: tuple[str, ...]) -> None:
        depth, start, block_start, prelude = 0, 0, 0, ""
        for m in _CSS_TOKEN.finditer(css):
            tok = m.group()
            if tok == "{":
                if depth == 0:
                    prelude, block_start = css[start:m.start()], m.end()
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    body = css[block_start:m.start()]
                    head = _strip_comments(prelude).strip()
                    if head.lower().startswith(("@media", "@supports")):
                        self._parse(body, media + (head,))
                    else:
                        self._add(media, _strip_comments(prelude).strip(), body)
                    start = m.end()
            elif tok.startswith("/*") and depth == 0:
                start = m.end()

    def subset(self, html: str) -> bytes:
        tokens = set(_HTML_TOKENS.findall(html))
        keep = set(self.always)
        for tok in tokens:
            for idx, classes in self.by_class.get(tok, ()):
                if idx not in keep and classes <= tokens:
                    keep.add(idx)
        out: list[str] = []
        open_: tuple[str, ...] = ()
        for idx in sorted(keep):
            media, text = self.items[idx]
            if media != open_:
                common = 0
                while common < min(len(media), len(open_)) and media[common] == open_[common]:
                    common += 1
                out.append("}" * (len(open_) - common))
                out.extend(m + "{" for m in media[common:])
                open_ = media
            out.append(text)
        out.append("}" * len(open_))
        return "".join(out).encode()


_subsets: dict[tuple[str, float, int], TailwindSubset] = {}
_subsets_lock = threading.Lock()


def _tailwind_subset(path: Path, css: bytes) -> TailwindSubset:
    """Parsed once per process and file (~0.4 s), shared by all renderers."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime, len(css))
    with _subsets_lock:
        if key not in _subsets:
            _subsets[key] = TailwindSubset(css.decode("utf-8", "replace"))
        return _subsets[key]


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def png_size(png: bytes) -> tuple[int, int]:
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", png[16:24])


def same_pixels(a: bytes | None, b: bytes | None) -> bool:
    """Whether two PNGs decode to the same image (size, mode, every pixel): PNG is lossless, so two encoders of one
    screenshot may give different bytes but must give this."""
    if a is None or b is None or a == b:
        return a == b
    from PIL import Image  # only here: the renderer itself needs no image library

    with Image.open(io.BytesIO(a)) as x, Image.open(io.BytesIO(b)) as y:
        return (x.size, x.mode) == (y.size, y.mode) and x.tobytes() == y.tobytes()


def solid_png(width: int, height: int, rgb: tuple[int, int, int] = PLACEHOLDER_GREY) -> bytes:
    """A solid-colour RGB PNG, encoded here (no image library needed)."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    row = b"\x00" + bytes(rgb) * width
    raw = zlib.compress(row * height, 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def placeholder_size(url: str) -> tuple[int, int]:
    """The size an image URL asks for (placeholder services, unsplash source, picsum), else the default."""
    path = url.split("://", 1)[-1]
    size = None
    for pat in _SIZE_PATTERNS:
        m = pat.search(path)
        if m:
            size = int(m.group(1)), int(m.group(2))
            break
    if size is None:
        w, h = _SIZE_QUERY_W.search(path), _SIZE_QUERY_H.search(path)
        if w and h:
            size = int(w.group(1)), int(h.group(1))
        elif w or h:
            size = int((w or h).group(1)), int((w or h).group(1))
    if size is None:
        m = _SQUARE.search(path)
        if m:
            size = int(m.group(1)), int(m.group(1))
    if size is None or not (size[0] and size[1]):
        return PLACEHOLDER_DEFAULT
    return min(size[0], PLACEHOLDER_MAX), min(size[1], PLACEHOLDER_MAX)


def rewrite_tailwind_scripts(html: str) -> str:
    """Replace Tailwind Play CDN / browser-build script tags with a link to the (locally served) v2 stylesheet."""
    return _TAILWIND_SCRIPT.sub(f'<link rel="stylesheet" href="{TAILWIND_URL}">', html)


_warned_tailwind: set[str] = set()
_warn_lock = threading.Lock()


def _warn_once(key: str, msg: str) -> None:
    with _warn_lock:
        if key in _warned_tailwind:
            return
        _warned_tailwind.add(key)
    log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
