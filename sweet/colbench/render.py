"""Render model-written HTML pages to PNG screenshots: offline, time-limited, one pooled browser.

Frontend ColBench compares the agent's page with the reference page as images; this module makes those images.

Design:
* One Chromium (Playwright's own where installed, else the system one: ``scripts/setup_browser.sh``) per
  :class:`Renderer`, driven with Playwright's async API inside a private event-loop thread.  ``render`` /
  ``render_many`` submit jobs to that loop, so any number of caller threads may use one renderer (Playwright's sync
  API is not thread-safe; this is the supported way round it).
* A bounded pool of *slots*; a slot is its own browser context (own renderer process, own storage) with one page.
  A slot is reused for later renders (a navigation to a fresh URL per render) and replaced after
  ``recycle_after`` renders, or at once when the page stopped answering (a script loop), crashed or left its
  content.  Closing the context kills its renderer process, so one stuck page never poisons the pool.
* Pages are served from a fresh origin per render, ``https://p<n>.sweet-render.invalid/``, through route
  interception: no file:// document, and no origin shared between two renders.  Every other request is
  answered locally and none reaches a network:
    - Tailwind CSS (the jsdelivr / unpkg / cdnjs URLs of ``tailwind(.min).css``) -> the local copy of
      tailwindcss@2.2.19 ``dist/tailwind.min.css`` (``artifacts/vendor/``, fetched by the set-up script).  A page
      that uses the Tailwind Play CDN script (``<script src="https://cdn.tailwindcss.com">``, or
      ``@tailwindcss/browser``) gets that script tag replaced by a link to the same stylesheet before it is
      rendered, so it renders with JavaScript off too (v2 classes only: v3-only classes and ``tailwind.config``
      have no effect).  Without the local copy, pages render unstyled and a warning says so once.  Each page is
      sent only the rules it can use (:class:`TailwindSubset`, Tailwind's own purge semantics; identical pixels,
      ~2.5x the pages/s of shipping the 2.9 MB file every time; ``tailwind_subset=False`` sends it whole).
    - images -> a grey PNG placeholder, sized from the URL when it names a size (``400x300``,
      ``picsum.photos/400/300``, ``?w=400&h=300``), else 320x240;
    - any other navigation (meta refresh, ``location=``, links, iframes, popups) -> ``204 No Content``, which
      leaves the frame where it was; a blocked main-frame navigation is reported in ``error``;
    - everything else (scripts, fonts, other stylesheets, fetch/XHR, media, websockets) -> aborted.
  Every request is logged in ``RenderResult.requests``.  As a second wall, Chromium starts with a dead proxy for
  every host (loopback included) and a host resolver that resolves nothing, so a request that escaped the
  interception could still not connect anywhere.  Service workers and downloads are off; popups are closed.
* JavaScript is OFF by default (``javascript=False``): WebSight pages are static HTML+CSS, and the Play CDN variant
  is handled by the rewrite above, so the safe default costs no fidelity on the task's pages.  With
  ``javascript=True`` scripts run, still offline; a script that never yields is caught by the time limit.
* Time limits: the page gets ``timeout_s`` to fire ``load``; on a load timeout the page is probed (1 s) and, if it
  still answers, whatever it shows is captured (a clipped/partial screenshot with error "load timed out"); the
  capture itself also has ``timeout_s``.  When nothing can be captured the result carries a white viewport-sized
  PNG (``blank_on_failure``) and the reason.  Each page's whole job is bounded inside the loop (about
  3 x timeout_s); the calling thread also watches the loop (a heartbeat, a per-job limit), so a call never hangs
  even if the browser or the loop does.  A browser that died is relaunched on the next render.
* Screenshots: fixed viewport (CSS px = image px), full page, clipped to ``max_height`` (4x the viewport height
  by default) so an enormous document gives a defined, clipped image (``clipped=True``).
* Chromium runs without its OS sandbox when started as root (it refuses otherwise); the page is confined by the
  browser's own process/site isolation, the blocked network and the absence of file access.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import re
import shutil
import struct
import threading
import time
import warnings
import weakref
import zlib
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

log = logging.getLogger(__name__)

TAILWIND_VERSION = "2.2.19"
TAILWIND_URL = f"https://cdn.jsdelivr.net/npm/tailwindcss@{TAILWIND_VERSION}/dist/tailwind.min.css"
_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TAILWIND_CSS = _ROOT / "artifacts" / "vendor" / f"tailwindcss@{TAILWIND_VERSION}" / "tailwind.min.css"
PAGE_HOST = "sweet-render.invalid"
PLACEHOLDER_GREY = (204, 204, 204)
PLACEHOLDER_DEFAULT = (320, 240)
PLACEHOLDER_MAX = 2000

# Belt and braces under route interception: no request can connect anywhere even if one escaped it.
LAUNCH_ARGS = [
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",  # also proxy (i.e. fail) loopback, which is bypassed implicitly otherwise
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-first-run",
    "--no-pings",
    "--disable-dev-shm-usage",
    "--force-color-profile=srgb",
    "--hide-scrollbars",
    "--disable-partial-raster",  # measured: without it, input borders differ by 1-2 levels between identical renders
    "--disable-checker-imaging",  # images decoded before raster, never drawn later
    "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,Translate,MediaRouter,OptimizationHints",
]

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


class BrowserUnavailable(RuntimeError):
    """No Chromium could be found or launched."""


@dataclass(frozen=True)
class RenderResult:
    """One rendered page.  ``png`` is set even on failure (a white viewport image) unless ``blank_on_failure`` is
    off; ``error`` is None only for a page that loaded, stayed put and was captured."""
    png: bytes | None
    error: str | None
    width: int
    height: int
    elapsed_s: float
    clipped: bool = False  # the document was taller than max_height
    requests: tuple[tuple[str, str, str], ...] = field(default=(), repr=False)  # (url, resource type, action)

    @property
    def ok(self) -> bool:
        return self.error is None


def png_size(png: bytes) -> tuple[int, int]:
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", png[16:24])


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


def find_chromium(executable_path: str | os.PathLike | None = None) -> str | None:
    """The Chromium to launch: the argument, else $SWEET_CHROMIUM, else Playwright's own browser (returned as None:
    Playwright finds it itself), else a system Chromium.  Raises BrowserUnavailable when there is none."""
    explicit = executable_path or os.environ.get("SWEET_CHROMIUM")
    if explicit:
        p = Path(explicit)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise BrowserUnavailable(f"Chromium executable {str(p)!r} (from "
                                     f"{'executable_path' if executable_path else 'SWEET_CHROMIUM'}) is not an "
                                     "executable file")
        return str(p)
    if _playwright_browser_installed():
        return None
    found = _system_chromium()
    if found:
        return found
    raise BrowserUnavailable("no Chromium found: run scripts/setup_browser.sh (installs the Debian package "
                             "'chromium'), or set SWEET_CHROMIUM / pass executable_path")


def _system_chromium() -> str | None:
    # Debian's /usr/bin/chromium is a shell wrapper adding desktop flags; launch the binary itself.
    if os.access("/usr/lib/chromium/chromium", os.X_OK):
        return "/usr/lib/chromium/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _playwright_browser_installed() -> bool:
    """Whether `playwright install chromium` put a browser in its cache (it cannot download on our machines)."""
    base = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    if not base.is_dir():
        return False
    return any((d / "chrome-linux").is_dir() or (d / "chrome-linux64").is_dir()
               or (d / "chrome-headless-shell-linux64").is_dir()
               for d in base.glob("chromium*"))


def browser_available(executable_path: str | None = None) -> tuple[bool, str]:
    """(True, path or 'playwright') when a Chromium can be found, else (False, why)."""
    try:
        exe = find_chromium(executable_path)
    except BrowserUnavailable as e:
        return False, str(e)
    return True, exe or "playwright"


_live: "weakref.WeakSet[Renderer]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for r in list(_live):
        try:
            r.close()
        except Exception:  # noqa: BLE001
            pass


_warned_tailwind: set[str] = set()
_warn_lock = threading.Lock()


def _warn_once(key: str, msg: str) -> None:
    with _warn_lock:
        if key in _warned_tailwind:
            return
        _warned_tailwind.add(key)
    log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _frame_of(request):
    try:
        return request.frame
    except Exception:  # noqa: BLE001 - e.g. service-worker requests have no frame
        return None


class _Job:
    __slots__ = ("url", "html", "served", "requests", "events", "css", "left")

    def __init__(self, url: str, html: str):
        self.url, self.html, self.served = url, html, False
        self.left = asyncio.Event()  # the main frame tried to navigate away
        self.css: bytes | None = None
        self.requests: list[tuple[str, str, str]] = []
        self.events: list[str] = []


class _Slot:
    __slots__ = ("ctx", "page", "uses", "job", "generation")

    def __init__(self, ctx, page, generation: int):
        self.ctx, self.page, self.generation = ctx, page, generation
        self.uses = 0
        self.job: _Job | None = None


class Renderer:
    """A pooled, offline page renderer; see the module docstring.  Use as a context manager or call close().

    >>> with Renderer(pool_size=4) as r:
    ...     res = r.render("<div class='bg-blue-500 h-20'></div>")
    """

    def __init__(self, pool_size: int = 4, viewport: tuple[int, int] = (1280, 720), timeout_s: float = 10.0,
                 max_height: int | None = None, javascript: bool = False,
                 executable_path: str | os.PathLike | None = None, tailwind_css: str | os.PathLike | None = None,
                 max_html_bytes: int = 2_000_000, blank_on_failure: bool = True, recycle_after: int = 200,
                 tailwind_subset: bool = True):
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        vw, vh = int(viewport[0]), int(viewport[1])
        if vw < 16 or vh < 16:
            raise ValueError(f"viewport must be at least 16x16, got {viewport}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.pool_size, self.viewport, self.timeout_s = pool_size, (vw, vh), float(timeout_s)
        self.max_height = int(max_height) if max_height else 4 * vh
        if self.max_height < vh:
            raise ValueError(f"max_height ({self.max_height}) must be >= the viewport height ({vh})")
        self.javascript, self.max_html_bytes = javascript, max_html_bytes
        self.blank_on_failure, self.recycle_after = blank_on_failure, max(1, recycle_after)
        self.executable_path = find_chromium(executable_path)
        css_path = Path(tailwind_css or os.environ.get("SWEET_TAILWIND_CSS") or DEFAULT_TAILWIND_CSS)
        self.tailwind_css: bytes | None = css_path.read_bytes() if css_path.is_file() else None
        self._tw_subset = (_tailwind_subset(css_path, self.tailwind_css)
                           if tailwind_subset and self.tailwind_css else None)
        if self.tailwind_css is None:
            _warn_once(str(css_path), f"Tailwind CSS not found at {css_path}: pages render WITHOUT Tailwind "
                                      "(run scripts/setup_browser.sh to fetch it)")
        self.launches = 0  # browser launches so far (1 unless the browser died)
        self.slots_created = 0  # browser contexts made (pool_size at most, plus replacements)
        self.slots_replaced = 0
        self._counter = itertools.count(1)
        self._placeholders: dict[tuple[int, int], bytes] = {}
        self._blank: bytes | None = None
        self._closed = False
        self._beat = time.monotonic()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="sweet-renderer", daemon=True)
        self._thread.start()
        try:
            self._call(self._start(), timeout=120)
        except BaseException:
            self._closed = True
            try:
                self._call(self._shutdown(), timeout=30)
            except Exception:  # noqa: BLE001
                pass
            self._stop_loop()
            raise
        _live.add(self)

    # ---- public API (any thread) -----------------------------------------------------------------------------
    def render(self, html: str) -> RenderResult:
        return self.render_many([html])[0]

    def render_many(self, htmls: Iterable[str]) -> list[RenderResult]:
        """Render pages concurrently (up to pool_size at once); results in input order."""
        htmls = list(htmls)
        if self._closed:
            raise RuntimeError("Renderer is closed")
        if threading.current_thread() is self._thread:
            raise RuntimeError("render() called from the renderer's own thread")
        t0 = time.monotonic()
        starts: list[list[float]] = [[] for _ in htmls]  # set by the job when it gets a slot
        futs = [asyncio.run_coroutine_threadsafe(self._render(h, st), self._loop) for h, st in zip(htmls, starts)]
        # Every page has its own time limits inside the loop (asyncio.wait_for); this outer guard only covers a
        # loop that stopped running (a job running far past its limits, or no heartbeat), so no call can hang.
        job_limit = 3 * self.timeout_s + 40
        out = []
        for f, st in zip(futs, starts):
            while True:
                try:
                    out.append(f.result(timeout=0.5))
                    break
                except FutureTimeout:
                    now = time.monotonic()
                    if (not self._thread.is_alive() or now - self._beat > 30
                            or (st and now - st[0] > job_limit)):
                        f.cancel()
                        out.append(self._failure("renderer unresponsive (hard time limit)", t0))
                        break
                except Exception as e:  # noqa: BLE001 - a result for every page
                    out.append(self._failure(f"render failed: {type(e).__name__}: {e}", t0))
                    break
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._shutdown(), timeout=30)
        except Exception as e:  # noqa: BLE001
            log.warning("renderer shutdown: %s", e)
        self._stop_loop()

    def __enter__(self) -> "Renderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- loop thread plumbing --------------------------------------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._heartbeat)
        self._loop.run_forever()

    def _heartbeat(self) -> None:
        self._beat = time.monotonic()
        self._loop.call_later(0.5, self._heartbeat)

    def _call(self, coro, timeout: float):
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout=timeout)

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    async def _start(self) -> None:
        from playwright.async_api import async_playwright
        self._sem = asyncio.Semaphore(self.pool_size)
        self._idle: list[_Slot] = []
        self._launch_lock = asyncio.Lock()
        self._generation = 0
        self._browser = None
        self._pw = await async_playwright().start()
        await self._launch()

    async def _launch(self) -> None:
        kw = {"headless": True, "args": LAUNCH_ARGS}
        if self.executable_path:
            kw["executable_path"] = self.executable_path
        try:
            self._browser = await self._pw.chromium.launch(**kw)
        except Exception as e:
            system = None if self.executable_path else _system_chromium()
            if system is None:
                raise BrowserUnavailable(f"could not launch Chromium ({self.executable_path or 'playwright'}): "
                                         f"{str(e).splitlines()[0]}") from e
            log.warning("Playwright's own Chromium did not start (%s); using %s", str(e).splitlines()[0], system)
            self.executable_path = system  # e.g. only part of Playwright's browsers is installed
            await self._launch()
            return
        self.launches += 1
        self._generation += 1
        self._idle.clear()

    async def _shutdown(self) -> None:
        for slot in getattr(self, "_idle", ()):
            await self._close_ctx(slot)
        if getattr(self, "_browser", None) is not None:
            try:
                await asyncio.wait_for(self._browser.close(), 15)
            except Exception:  # noqa: BLE001
                pass
        try:
            if getattr(self, "_pw", None) is not None:
                await asyncio.wait_for(self._pw.stop(), 15)
        except Exception:  # noqa: BLE001
            pass
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:  # route handlers of pages that are gone
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    # ---- slots -----------------------------------------------------------------------------------------------
    async def _acquire(self) -> _Slot:
        async with self._launch_lock:
            if self._browser is None or not self._browser.is_connected():
                log.warning("browser is gone; relaunching")
                await self._launch()
        while self._idle:
            slot = self._idle.pop()
            if slot.generation == self._generation and not slot.page.is_closed():
                return slot
        return await self._new_slot()

    async def _new_slot(self) -> _Slot:
        vw, vh = self.viewport
        ctx = await self._browser.new_context(
            viewport={"width": vw, "height": vh}, device_scale_factor=1, java_script_enabled=self.javascript,
            service_workers="block", accept_downloads=False, locale="en-US", timezone_id="UTC",
            color_scheme="light", reduced_motion="reduce")
        ctx.set_default_timeout(self.timeout_s * 1000)
        page = await ctx.new_page()
        slot = _Slot(ctx, page, self._generation)
        self.slots_created += 1
        await ctx.route("**/*", lambda route: self._route(slot, route))
        try:
            await ctx.route_web_socket(re.compile(".*"), lambda ws: self._websocket(slot, ws))
        except Exception:  # noqa: BLE001 - older Playwright: the dead proxy still stops websockets
            pass
        ctx.on("page", lambda p: self._popup(slot, p))
        page.on("download", lambda d: self._event(slot, "download blocked"))
        page.on("crash", lambda _p: self._event(slot, "renderer crashed"))
        return slot

    async def _release(self, slot: _Slot, healthy: bool) -> None:
        slot.job = None
        slot.uses += 1
        if healthy and slot.uses < self.recycle_after and slot.generation == self._generation:
            self._idle.append(slot)
        else:
            self.slots_replaced += 1
            await self._close_ctx(slot)

    @staticmethod
    async def _close_ctx(slot: _Slot) -> None:
        try:
            await asyncio.wait_for(slot.ctx.close(), 10)
        except Exception as e:  # noqa: BLE001 - a dead browser is relaunched by the next _acquire
            log.debug("closing a context: %s", e)

    # ---- event handlers (loop thread) ------------------------------------------------------------------------
    def _event(self, slot: _Slot, what: str) -> None:
        if slot.job is not None and what not in slot.job.events:
            slot.job.events.append(what)

    def _popup(self, slot: _Slot, page) -> None:
        if page is slot.page:
            return
        self._event(slot, "popup blocked")
        asyncio.ensure_future(self._close_page(page))

    @staticmethod
    async def _close_page(page) -> None:
        try:
            await asyncio.wait_for(page.close(), 10)
        except Exception:  # noqa: BLE001
            pass

    def _websocket(self, slot: _Slot, ws) -> None:
        if slot.job is not None:
            slot.job.requests.append((ws.url, "websocket", "blocked"))
        asyncio.ensure_future(self._close_ws(ws))

    @staticmethod
    async def _close_ws(ws) -> None:
        try:
            await ws.close()
        except Exception:  # noqa: BLE001
            pass

    async def _route(self, slot: _Slot, route) -> None:
        req = route.request
        url, rtype, job = req.url, req.resource_type, slot.job
        action = "blocked"
        try:
            if job is not None and url == job.url and not job.served:
                job.served, action = True, "page"
                await route.fulfill(status=200, content_type="text/html; charset=utf-8", body=job.html)
            elif req.is_navigation_request():
                action = "navigation blocked"
                if job is not None:
                    frame = _frame_of(req)
                    if frame is None or frame.page is not slot.page:
                        # A new window: Playwright has no frame for it yet (and no page event: it stays empty).
                        self._event(slot, "popup blocked")
                    elif frame == slot.page.main_frame:
                        self._event(slot, f"navigation blocked: {url[:200]}")
                        job.left.set()
                await route.fulfill(status=204, body=b"")
            elif _TAILWIND_CSS_URL.match(url):
                if self.tailwind_css is not None:
                    body = self.tailwind_css
                    if self._tw_subset is not None and job is not None:
                        if job.css is None:
                            job.css = self._tw_subset.subset(job.html)
                        body = job.css
                    action = f"tailwind {TAILWIND_VERSION} (local, {len(body)} bytes)"
                    await route.fulfill(status=200, content_type="text/css; charset=utf-8", body=body)
                else:
                    action = "blocked (no local tailwind)"
                    await route.abort("blockedbyclient")
            elif rtype == "image":
                size = placeholder_size(url)
                action = f"placeholder {size[0]}x{size[1]}"
                await route.fulfill(status=200, content_type="image/png", body=self._placeholder(size))
            else:
                await route.abort("blockedbyclient")
        except Exception as e:  # noqa: BLE001 - the page may be gone already
            log.debug("route %s: %s", url, e)
        if job is not None:
            job.requests.append((url, rtype, action))

    def _placeholder(self, size: tuple[int, int]) -> bytes:
        png = self._placeholders.get(size)
        if png is None:
            if len(self._placeholders) > 256:
                self._placeholders.clear()
            png = self._placeholders[size] = solid_png(*size)
        return png

    # ---- one render (loop thread) ----------------------------------------------------------------------------
    def _failure(self, reason: str, t0: float) -> RenderResult:
        vw, vh = self.viewport
        png = None
        if self.blank_on_failure:
            if self._blank is None:
                self._blank = solid_png(vw, vh, (255, 255, 255))
            png = self._blank
        return RenderResult(png, reason, vw if png else 0, vh if png else 0, time.monotonic() - t0)

    async def _render(self, html: str, started: list[float] | None = None) -> RenderResult:
        t0 = time.monotonic()
        if not isinstance(html, str):
            return self._failure(f"html must be a str, got {type(html).__name__}", t0)
        if len(html.encode("utf-8", "replace")) > self.max_html_bytes:
            return self._failure(f"html too large ({len(html)} chars > {self.max_html_bytes} bytes)", t0)
        html = rewrite_tailwind_scripts(html)
        async with self._sem:
            t0 = time.monotonic()  # elapsed_s counts this page's own work, not its wait for a free slot
            if started is not None:
                started.append(t0)
            try:
                slot = await self._acquire()
            except Exception as e:  # noqa: BLE001
                return self._failure(f"browser unavailable: {e}", t0)
            healthy = False
            job = _Job(f"https://p{next(self._counter)}.{PAGE_HOST}/", html)
            slot.job = job
            try:
                res, healthy = await asyncio.wait_for(self._render_in(slot, job, t0), 3 * self.timeout_s + 10)
            except asyncio.TimeoutError:
                res = self._failure("render timed out", t0)
            except Exception as e:  # noqa: BLE001
                res = self._failure(f"render failed: {type(e).__name__}: {str(e).splitlines()[0]}", t0)
            finally:
                await self._release(slot, healthy)
            return res

    async def _render_in(self, slot: _Slot, job: _Job, t0: float) -> tuple[RenderResult, bool]:
        from playwright.async_api import Error as PWError, TimeoutError as PWTimeout
        page, errors = slot.page, []
        try:
            await self._load(page, job)
        except (PWTimeout, asyncio.TimeoutError):
            errors.append(f"load timed out after {self.timeout_s:g}s")
        except PWError as e:
            errors.append(f"load failed: {str(e).splitlines()[0]}")
        if errors:  # does the page still answer (a resource that never came) or is a script spinning?
            try:
                await asyncio.wait_for(page.evaluate("1"), 1.0)
            except Exception:  # noqa: BLE001
                return self._with(self._failure("; ".join(errors + ["page unresponsive (script never yields?)"]),
                                                t0), job), False
        try:
            png, clipped = await asyncio.wait_for(self._capture(page), self.timeout_s)
        except (asyncio.TimeoutError, PWTimeout):
            errors.append("screenshot timed out (page unresponsive)")
            return self._with(self._failure("; ".join(errors), t0), job), False
        except PWError as e:
            errors.append(f"screenshot failed: {str(e).splitlines()[0]}")
            return self._with(self._failure("; ".join(errors), t0), job), False
        healthy = not errors  # a page that timed out loading is replaced: nothing of it may linger in the pool
        if page.url != job.url:
            errors.append(f"page left its content for {page.url[:200]}")
            healthy = False
        errors = job.events + errors
        if "renderer crashed" in errors:
            healthy = False
        w, h = png_size(png)
        return RenderResult(png, "; ".join(errors) or None, w, h, time.monotonic() - t0, clipped,
                            tuple(job.requests)), healthy

    async def _load(self, page, job: _Job) -> None:
        """Navigate and wait for `load`, or, once the page tried to navigate away (which stops its loading, so
        `load` may never come), for a short grace: every resource is answered locally, so it is quick."""
        deadline = time.monotonic() + self.timeout_s
        await page.goto(job.url, wait_until="commit", timeout=self.timeout_s * 1000)
        load = asyncio.ensure_future(page.wait_for_load_state("load", timeout=self.timeout_s * 1000))
        left = asyncio.ensure_future(job.left.wait())
        try:
            done, _ = await asyncio.wait({load, left}, timeout=max(0.0, deadline - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if load in done:
                load.result()
            elif left in done:
                await asyncio.wait({load}, timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            else:
                raise asyncio.TimeoutError
        finally:
            for t in (load, left):
                if not t.done():
                    t.cancel()
            await asyncio.gather(load, left, return_exceptions=True)

    async def _capture(self, page) -> tuple[bytes, bool]:
        vw, vh = self.viewport
        full = await page.evaluate(
            "() => Math.max(document.documentElement ? document.documentElement.scrollHeight : 0,"
            " document.body ? document.body.scrollHeight : 0)")
        height = max(vh, min(int(full or 0), self.max_height))
        png = await page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": vw, "height": height},
                                    animations="disabled", caret="hide", type="png",
                                    timeout=self.timeout_s * 1000)
        return png, int(full or 0) > self.max_height

    @staticmethod
    def _with(res: RenderResult, job: _Job) -> RenderResult:
        return RenderResult(res.png, "; ".join(job.events + [res.error]) if res.error else None, res.width,
                            res.height, res.elapsed_s, res.clipped, tuple(job.requests))


def render_pages(htmls: Sequence[str], **kwargs) -> list[RenderResult]:
    """One-off helper: a renderer for these pages only (prefer one long-lived Renderer)."""
    with Renderer(**kwargs) as r:
        return r.render_many(htmls)
