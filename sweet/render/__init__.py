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
  interception: no file:// document, and, with JavaScript on, no origin shared between two renders (with it off,
  a slot's later renders replace its document's content in place, ~2x the pages/s; scripts off, a page can
  neither store nor read anything an origin keeps: ``_slots._rewrite``).  Every other request is
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
  by default) so an enormous document gives a defined, clipped image (``clipped=True``).  Taken with one page
  evaluate and one CDP ``Page.captureScreenshot`` (``_shot``): the same steps and bytes as Playwright's
  ``page.screenshot(full_page=True, clip=..., animations="disabled", caret="hide")`` in 2 round trips, not ~8.
* DOM capture (``render(html, dom=True)``): right after the screenshot, so both see one page state, the page is
  read with ``sweet.render.dom.DOM_SCRIPT`` (works with JavaScript off) into ``RenderResult.dom``
  (``{"page": ..., "blocks": [...]}``), within ``timeout_s``.  A DOM that cannot be read is ``None`` and fails
  nothing: the screenshot stands, and a page that stopped answering is not reused.
* Chromium runs without its OS sandbox when started as root (it refuses otherwise); the page is confined by the
  browser's own process/site isolation, the blocked network and the absence of file access.

Layout: this module is the public API (every name below is importable from here) with the Renderer's loop thread
and one render's policy (limits, errors, results); ``_slots`` holds the pool's slots, their request routing
and the steps on a page (load, capture, DOM); ``_shot`` the screenshot's page script and CDP call; ``_browser``
finds and launches Chromium; ``_assets`` holds the Tailwind subset, the placeholder images and the PNG helpers.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

# Re-exported: these names were defined here before the split, and callers import them from this module.
from sweet.render._assets import (  # noqa: F401
    _TAILWIND_CSS_URL, _TAILWIND_SCRIPT, DEFAULT_TAILWIND_CSS, PLACEHOLDER_DEFAULT, PLACEHOLDER_GREY,
    PLACEHOLDER_MAX, TAILWIND_URL, TAILWIND_VERSION, TailwindSubset, _tailwind_subset, _warn_once, placeholder_size,
    png_size, rewrite_tailwind_scripts, same_pixels, solid_png)
from sweet.render._browser import (  # noqa: F401
    LAUNCH_ARGS, BrowserUnavailable, _playwright_browser_installed, _system_chromium, browser_available,
    find_chromium, launch_chromium)
from sweet.render._slots import PAGE_HOST, _Job, _Slot, _SlotPool

log = logging.getLogger(__name__)


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
    dom: dict | None = field(default=None, repr=False)  # {"page", "blocks"} of sweet/render/dom.py, if asked for

    @property
    def ok(self) -> bool:
        return self.error is None


_live: "weakref.WeakSet[Renderer]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for r in list(_live):
        try:
            r.close()
        except Exception:  # noqa: BLE001
            pass


class Renderer(_SlotPool):
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
    def render(self, html: str, dom: bool = False) -> RenderResult:
        return self.render_many([html], dom=dom)[0]

    def render_many(self, htmls: Iterable[str], dom: bool = False) -> list[RenderResult]:
        """Render pages concurrently (up to pool_size at once); results in input order.  With ``dom=True`` each
        result also carries the page's blocks (``RenderResult.dom``; None when they could not be read)."""
        htmls = list(htmls)
        if self._closed:
            raise RuntimeError("Renderer is closed")
        if threading.current_thread() is self._thread:
            raise RuntimeError("render() called from the renderer's own thread")
        t0 = time.monotonic()
        starts: list[list[float]] = [[] for _ in htmls]  # set by the job when it gets a slot
        futs = [asyncio.run_coroutine_threadsafe(self._render(h, st, dom), self._loop)
                for h, st in zip(htmls, starts)]
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
        self._browser, self.executable_path = await launch_chromium(self._pw, self.executable_path)
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

    # ---- one render (loop thread) ----------------------------------------------------------------------------
    def _failure(self, reason: str, t0: float) -> RenderResult:
        vw, vh = self.viewport
        png = None
        if self.blank_on_failure:
            if self._blank is None:
                self._blank = solid_png(vw, vh, (255, 255, 255))
            png = self._blank
        return RenderResult(png, reason, vw if png else 0, vh if png else 0, time.monotonic() - t0, dom=None)

    async def _render(self, html: str, started: list[float] | None = None, dom: bool = False) -> RenderResult:
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
                # load + probe + capture + dom: at most 3 x timeout_s + 1 s, so this only catches a stuck driver
                res, healthy = await asyncio.wait_for(self._render_in(slot, job, t0, dom), 3 * self.timeout_s + 10)
            except asyncio.TimeoutError:
                res = self._failure("render timed out", t0)
            except Exception as e:  # noqa: BLE001
                res = self._failure(f"render failed: {type(e).__name__}: {str(e).splitlines()[0]}", t0)
            finally:
                await self._release(slot, healthy)
            return res

    async def _render_in(self, slot: _Slot, job: _Job, t0: float, dom: bool) -> tuple[RenderResult, bool]:
        from playwright.async_api import Error as PWError, TimeoutError as PWTimeout
        page, errors = slot.page, []
        try:
            await self._load(slot, job)
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
            png, clipped = await asyncio.wait_for(self._capture(slot), self.timeout_s)
        except (asyncio.TimeoutError, PWTimeout):
            errors.append("screenshot timed out (page unresponsive)")
            return self._with(self._failure("; ".join(errors), t0), job), False
        except PWError as e:
            errors.append(f"screenshot failed: {str(e).splitlines()[0]}")
            return self._with(self._failure("; ".join(errors), t0), job), False
        healthy = not errors  # a page that timed out loading is replaced: nothing of it may linger in the pool
        tree, answered = await self._dom(page) if dom else (None, True)
        healthy = healthy and answered
        if page.url != job.url:
            errors.append(f"page left its content for {page.url[:200]}")
            healthy, tree = False, None  # the DOM may be another document's
        errors = job.events + errors
        if "renderer crashed" in errors:
            healthy = False
        w, h = png_size(png)
        return RenderResult(png, "; ".join(errors) or None, w, h, time.monotonic() - t0, clipped,
                            tuple(job.requests), tree), healthy

    @staticmethod
    def _with(res: RenderResult, job: _Job) -> RenderResult:
        return RenderResult(res.png, "; ".join(job.events + [res.error]) if res.error else None, res.width,
                            res.height, res.elapsed_s, res.clipped, tuple(job.requests), dom=None)


def render_pages(htmls: Sequence[str], dom: bool = False, **kwargs) -> list[RenderResult]:
    """One-off helper: a renderer for these pages only (prefer one long-lived Renderer)."""
    with Renderer(**kwargs) as r:
        return r.render_many(htmls, dom=dom)
