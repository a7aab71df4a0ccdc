"""The renderer's slots (sweet/render/__init__.py): a browser context and page each, what their requests get, and
the steps of one render on a page (load, capture, DOM).

Split out of render.py, which keeps the public API, the event-loop thread and one render's policy (time limits,
errors, results).  `_SlotPool` is a part of `Renderer` (a mixin, run on the loop thread only) and uses its
attributes: the browser and its lock, the idle slots, viewport, javascript, timeout_s, max_height, recycle_after,
tailwind_css and its subset, the placeholder cache.  Request routing lives here because it is wired to each slot's
context and reports into the slot's current job.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

from sweet.render._assets import TAILWIND_VERSION, _TAILWIND_CSS_URL, placeholder_size, solid_png
from sweet.render._shot import CLEANUP_SCRIPT, NOT_READY, READY_SCRIPT, capture
from sweet.render.dom import DOM_SCRIPT, MAX_BLOCKS

log = logging.getLogger("sweet.render")  # the package logger, whichever module logs

PAGE_HOST = "sweet-render.invalid"
# Pages that _rewrite cannot render as a fresh document does, so they always navigate: imported sheets, and autofocus
# (a rewritten document keeps its "autofocus processed" flag, so a field focused on a fresh page stays unfocused:
# measured, a different PNG for the same page depending on its slot's history).
_NAVIGATE_ONLY = re.compile(r"@import|autofocus", re.I)


def _frame_of(request):
    try:
        return request.frame
    except Exception:  # noqa: BLE001 - e.g. service-worker requests have no frame
        return None


class _Job:
    """One render in a slot: its page, and what its requests and events were (filled in by the handlers)."""

    __slots__ = ("url", "html", "served", "requests", "events", "css", "left", "ready_check", "deadline")

    def __init__(self, url: str, html: str):
        self.url, self.html, self.served = url, html, False
        self.ready_check: dict | None = None  # _rewrite left its readiness check to the capture's evaluate
        self.deadline = 0.0
        self.left = asyncio.Event()  # the main frame tried to navigate away
        self.css: bytes | None = None
        self.requests: list[tuple[str, str, str]] = []
        self.events: list[str] = []


class _Slot:
    """A browser context with its one page, reused for several renders."""

    __slots__ = ("ctx", "page", "cdp", "uses", "job", "generation", "doc_url", "frame_id", "loaded")

    def __init__(self, ctx, page, generation: int, cdp=None):
        self.ctx, self.page, self.generation = ctx, page, generation
        self.cdp = cdp  # the page's own CDP session, for the screenshot (sweet/render/_shot.py)
        self.uses = 0
        self.job: _Job | None = None
        self.doc_url: str | None = None  # JavaScript off: the URL of the slot's loaded document, reused (_rewrite)
        self.frame_id: str | None = None
        self.loaded = asyncio.Event()  # the slot's document fired `load` (CDP Page.loadEventFired; _rewrite)


class _SlotPool:
    """Slot lifecycle and request routing of a Renderer (see the module docstring)."""

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
        slot = _Slot(ctx, page, self._generation, await ctx.new_cdp_session(page))
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
                    await route.fulfill(status=200, content_type="text/css; charset=utf-8", body=body,
                                        headers={"Cache-Control": "no-store"})
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

    # ---- steps of one render on a slot's page (loop thread) -------------------------------------------------
    async def _load(self, slot: _Slot, job: _Job) -> None:
        """Navigate and wait for `load`, or, once the page tried to navigate away (which stops its loading, so
        `load` may never come), for a short grace: every resource is answered locally, so it is quick."""
        if slot.doc_url is not None and not self.javascript and not _NAVIGATE_ONLY.search(job.html):
            return await self._rewrite(slot, job)
        page = slot.page
        deadline = time.monotonic() + self.timeout_s
        await page.goto(job.url, wait_until="commit", timeout=self.timeout_s * 1000)
        load = asyncio.ensure_future(page.wait_for_load_state("load", timeout=self.timeout_s * 1000))
        left = asyncio.ensure_future(job.left.wait())
        try:
            done, _ = await asyncio.wait({load, left}, timeout=max(0.0, deadline - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if load in done:
                load.result()
                if not self.javascript and not job.left.is_set():
                    slot.doc_url = job.url
            elif left in done:
                await asyncio.wait({load}, timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            else:
                raise asyncio.TimeoutError
        finally:
            for t in (load, left):
                if not t.done():
                    t.cancel()
            await asyncio.gather(load, left, return_exceptions=True)

    async def _rewrite(self, slot: _Slot, job: _Job) -> None:
        """JavaScript off, the slot's page already holds one of our documents: replace its content in place
        (CDP ``Page.setDocumentContent``, i.e. document.open/write/close) instead of navigating to a fresh origin.
        Measured: ~2.3x less CPU per page (no navigation, no new document/frame in the browser), identical PNGs.
        The origin is then shared by this slot's renders, which with scripts off can neither store nor read
        anything; subresources still go through the route handler (the Tailwind subset is sent ``no-store``
        so the next document cannot reuse this one's).  Ready = the document's ``load`` event, then every local
        Tailwind sheet applied and every <img> decoded (``READY_SCRIPT``): checked by the capture's own evaluate
        when the event came (``_capture``), else polled here until it holds."""
        job.deadline = time.monotonic() + self.timeout_s
        job.url, job.served = slot.doc_url, True  # a navigation back to it is blocked, as after a goto
        if slot.frame_id is None:
            slot.frame_id = (await slot.cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
            slot.cdp.on("Page.loadEventFired", lambda _e: slot.loaded.set())
            await slot.cdp.send("Page.enable")
        slot.loaded.clear()
        await slot.cdp.send("Page.setDocumentContent", {"frameId": slot.frame_id, "html": job.html})
        # Wait for the document's `load` event (stylesheets and images delay it) instead of polling: the poll's
        # round trips through the driver cost CPU that renders on 2 cores share. A late event of the previous
        # document only makes the capture's check fail, and it polls then; a page that tried to leave or a load
        # slower than 1 s polls now.
        waits = [asyncio.ensure_future(e.wait()) for e in (slot.loaded, job.left)]
        try:
            await asyncio.wait(waits, timeout=min(1.0, max(0.0, job.deadline - time.monotonic())),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        tailwind = None if self.tailwind_css is None else _TAILWIND_CSS_URL.pattern
        if slot.loaded.is_set() and not job.left.is_set():
            job.ready_check = {"tailwind": tailwind}
            return
        await self._poll_ready(slot.page, job, tailwind)

    async def _poll_ready(self, page, job: _Job, tailwind: str | None) -> None:
        """Evaluate READY_SCRIPT until it holds, within the job's deadline; a page that tried to navigate away
        gets a short grace, as in _load."""
        left_at = None
        while not await asyncio.wait_for(page.evaluate(READY_SCRIPT, tailwind),
                                         max(0.05, job.deadline - time.monotonic())):
            now = time.monotonic()
            if job.left.is_set():
                left_at = left_at or now
                if now - left_at > 0.5:
                    return
            if now > job.deadline:
                raise asyncio.TimeoutError
            await asyncio.sleep(0.002)

    async def _await_ready(self, slot: _Slot) -> None:
        """The readiness check _rewrite left to the capture, on its own (for a capture without PREPARE_SCRIPT)."""
        if slot.job is not None and slot.job.ready_check is not None:
            await self._poll_ready(slot.page, slot.job, slot.job.ready_check["tailwind"])

    async def _capture(self, slot: _Slot) -> tuple[bytes, bool]:
        """One evaluate and one CDP capture (sweet/render/_shot.py): the bytes Playwright's clipped full-page
        screenshot gives, in two round trips instead of about eight. A reused document's readiness check rides in
        the same evaluate; when it fails (rare: a late event of the previous document), poll, then capture."""
        job = slot.job
        check = job.ready_check if job is not None else None
        got = await capture(slot.page, slot.cdp, self.viewport, self.max_height, check)
        if got == NOT_READY:
            await self._poll_ready(slot.page, job, check["tailwind"])
            got = await capture(slot.page, slot.cdp, self.viewport, self.max_height)
        return got if got is not None else await self._capture_playwright(slot.page)

    async def _capture_playwright(self, page) -> tuple[bytes, bool]:
        """Playwright's own screenshot: for a page without a body (it waits for one, within timeout_s)."""
        vw, vh = self.viewport
        full = await page.evaluate(
            "() => Math.max(document.documentElement ? document.documentElement.scrollHeight : 0,"
            " document.body ? document.body.scrollHeight : 0)")
        height = max(vh, min(int(full or 0), self.max_height))
        png = await page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": vw, "height": height},
                                    animations="disabled", caret="hide", type="png",
                                    timeout=self.timeout_s * 1000)
        return png, int(full or 0) > self.max_height

    async def _dom(self, page) -> tuple[dict | None, bool]:
        """(the page's blocks or None, whether the page still answered).  Failing here fails no render: the
        screenshot is already taken, so a DOM that cannot be read is only left out."""
        try:
            # Undo the screenshot's caret / animation changes first, as Playwright's screenshot did on return.
            tree = await asyncio.wait_for(page.evaluate(f"() => {{ ({CLEANUP_SCRIPT})(); return ({DOM_SCRIPT})(); }}"),
                                          self.timeout_s)
        except asyncio.TimeoutError:
            log.debug("dom capture timed out after %gs", self.timeout_s)
            return None, False  # a script that never yields: the slot must not be reused
        except Exception as e:  # noqa: BLE001 - e.g. the page crashed (reported by its own event)
            log.debug("dom capture failed: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
            return None, True
        # With JavaScript on the page can replace what DOM_SCRIPT calls: keep only the promised shape.
        if not (isinstance(tree, dict) and isinstance(tree.get("page"), dict)
                and isinstance(tree.get("blocks"), list)):
            return None, True
        return {"page": tree["page"], "blocks": tree["blocks"][:MAX_BLOCKS]}, True
