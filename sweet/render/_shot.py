"""The screenshot step of one render (sweet/render/_slots.py): one page evaluate and one CDP capture.

Why not ``page.screenshot``: for a clipped full-page PNG Playwright makes about seven browser round trips (prepare
the page in every frame, ``document.fonts.ready``, the page's full size, ``Page.getLayoutMetrics``,
``Page.captureScreenshot``, restore), each through its node driver; profiled (``bench/render_throughput.py
--profile``), the driver, the browser process and the waits around them were a large part of a pooled render.
Here the same steps run as ONE evaluate (``PREPARE_SCRIPT``) and one ``Page.captureScreenshot`` on the slot's own
CDP session, with the parameters Playwright sends (same clip, ``scale: 1``, ``captureBeyondViewport`` when the
document does not fit the viewport), so the image is the same.  One parameter differs: ``optimizeForSpeed``, Chromium's
fast PNG encoding (less zlib effort).  PNG is lossless, so the decoded pixels are Playwright's exactly (tested,
``same_pixels``); the bytes and the file are not (larger).  The capture is most of a pooled render's CPU
(profiled: 53 of 80 ms per page), and its default encoding was a large part of that.

What ``PREPARE_SCRIPT`` does, in Playwright's order (``inPagePrepareForScreenshots`` with ``caret="hide"`` and
``animations="disabled"``): measure the document height (our clip: max of the html and body ``scrollHeight``),
hide carets of inputs / textareas / contenteditables, finish finite animations and cancel infinite ones (also ones
that start during the capture), in the document, its shadow roots and same-origin iframes; wait for
``document.fonts.ready``; then measure the full-page size as Playwright does (which trims the clip).  Its cleanup
(carets back, infinite animations resumed) is kept in ``window.__sweetCleanup`` and run before a DOM capture, as
Playwright runs its own after the screenshot, so the DOM is read from the same page state as before.

Differences from Playwright, by design: the script runs in the page's main world (Playwright uses an isolated
one), so with ``javascript=True`` a page could change what it calls; it can only change its own pixels, which
such a page can do anyway.  The network guards are untouched: this step makes no request.
"""

from __future__ import annotations

import base64

# A reused document's readiness (sweet/render/_slots.py, _rewrite): `load` has come, every local Tailwind sheet is
# applied (measured: readyState alone, about 1 page in 150 was captured unstyled; other stylesheets are aborted, so
# they never apply in either path; a disabled link never loads, so it is skipped) and then every <img> decoded
# (without it, a rare image-less frame). The argument is _TAILWIND_CSS_URL's pattern, or null when no Tailwind copy is
# served. With JavaScript off an evaluated script gets no timers, so the wait itself cannot move into the page.
READY_SCRIPT = """async (tailwind) => {
  const re = tailwind === null ? null : new RegExp(tailwind, "i");
  if (document.readyState !== "complete") return false;
  if (re && [...document.querySelectorAll("link[rel~=stylesheet i]:not([disabled])")]
      .some((l) => re.test(l.href) && !l.sheet)) return false;
  await Promise.all([...document.images].map((i) => i.decode().catch(() => 0)));
  return true;
}"""

# `check`: null, or {tailwind} to run READY_SCRIPT first and return {ready: false} without touching the page when it
# fails (one evaluate for a reused document's readiness and the preparation: a round trip less per page).
PREPARE_SCRIPT = """async (check) => {
  if (check && !(await (""" + READY_SCRIPT + """)(check.tailwind))) return {ready: false};
  const de = document.documentElement, body = document.body;
  const h0 = Math.max(de ? de.scrollHeight : 0, body ? body.scrollHeight : 0);
  const roots = [];
  const collect = (root) => {
    roots.push(root);
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT);
    do {
      const node = walker.currentNode;
      if (node instanceof Element && node.shadowRoot) collect(node.shadowRoot);
      if (node instanceof HTMLIFrameElement) {
        let doc = null;
        try { doc = node.contentDocument; } catch (e) {}
        if (doc && doc.documentElement) collect(doc);
      }
    } while (walker.nextNode());
  };
  if (de) collect(document);
  const cleanups = [];
  const carets = new Map();
  for (const root of roots) {
    root.querySelectorAll("input,textarea,[contenteditable]").forEach((el) => {
      carets.set(el, {value: el.style.getPropertyValue("caret-color"),
                      priority: el.style.getPropertyPriority("caret-color")});
      el.style.setProperty("caret-color", "transparent", "important");
    });
  }
  cleanups.push(() => { for (const [el, v] of carets) el.style.setProperty("caret-color", v.value, v.priority); });
  const resume = new Set();
  const handle = (root) => {
    for (const a of root.getAnimations()) {
      if (!a.effect || a.playbackRate === 0 || resume.has(a)) continue;
      if (Number.isFinite(a.effect.getComputedTiming().endTime)) { try { a.finish(); } catch (e) {} }
      else { try { a.cancel(); resume.add(a); } catch (e) {} }
    }
  };
  for (const root of roots) {
    const h = () => handle(root);
    h();
    root.addEventListener("transitionrun", h);
    root.addEventListener("animationstart", h);
    cleanups.push(() => { root.removeEventListener("transitionrun", h); root.removeEventListener("animationstart", h); });
  }
  cleanups.push(() => { for (const a of resume) { try { a.play(); } catch (e) {} } });
  window.__sweetCleanup = () => { for (const c of cleanups) c(); delete window.__sweetCleanup; };
  try { await document.fonts.ready; } catch (e) {}
  const b = document.body, d = document.documentElement;
  if (!b || !d) return {ready: true, h0, full: null};
  return {ready: true, h0, full: {
    width: Math.max(b.scrollWidth, d.scrollWidth, b.offsetWidth, d.offsetWidth, b.clientWidth, d.clientWidth),
    height: Math.max(b.scrollHeight, d.scrollHeight, b.offsetHeight, d.offsetHeight, b.clientHeight, d.clientHeight)}};
}"""

CLEANUP_SCRIPT = "() => { if (window.__sweetCleanup) window.__sweetCleanup(); }"


def clip_for(viewport: tuple[int, int], max_height: int, h0: int, full: dict) -> tuple[dict, bool, bool]:
    """(CDP clip, captureBeyondViewport, clipped): our clip (viewport width, document height within [vh,
    max_height]) trimmed to the full-page size, as Playwright's ``trimClipToSize`` does."""
    vw, vh = viewport
    height = max(vh, min(h0, max_height))
    fw, fh = full["width"], full["height"]
    w, h = max(0, min(vw, fw)), max(0, min(height, fh))
    fits = fw <= vw and fh <= vh
    return {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}, not fits, h0 > max_height


NOT_READY = "not ready"
# Chromium's fast PNG encoder: same pixels as the default one, other bytes (module docstring).
FAST_PNG = True


async def capture(page, cdp, viewport: tuple[int, int], max_height: int,
                  check: dict | None = None) -> tuple[bytes, bool] | str | None:
    """(PNG, clipped), or None when the page has no body / documentElement (the caller falls back to Playwright's
    screenshot, which waits for them), or NOT_READY when `check` ({tailwind}: READY_SCRIPT's argument) found the
    page not ready yet (nothing on it was changed)."""
    got = await page.evaluate(PREPARE_SCRIPT, check)
    if got and got.get("ready") is False:
        return NOT_READY
    if not got or not got.get("full"):
        await page.evaluate(CLEANUP_SCRIPT)
        return None
    clip, beyond, clipped = clip_for(viewport, max_height, int(got["h0"] or 0), got["full"])
    if clip["width"] <= 0 or clip["height"] <= 0:
        await page.evaluate(CLEANUP_SCRIPT)
        return None
    shot = await cdp.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": beyond,
                                                     "optimizeForSpeed": FAST_PNG})
    return base64.b64decode(shot["data"]), clipped
