"""Offline, pooled page rendering (sweet/render/__init__.py) with a real Chromium.

Skipped (with the reason) when no Chromium can be found; scripts/setup_browser.sh provides one in CI.
"""
from __future__ import annotations

import asyncio
import io
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from sweet import render as R
from sweet.render.dom import MAX_BLOCKS

DATA = Path(__file__).parent / "data" / "frontend"
OK, WHY = R.browser_available()
needs_browser = pytest.mark.skipif(not OK, reason=f"no browser: {WHY}")
needs_tailwind = pytest.mark.skipif(not R.DEFAULT_TAILWIND_CSS.is_file(),
                                    reason="local Tailwind CSS missing: run scripts/setup_browser.sh")
BLUE_500, RED_500, GREEN_500, YELLOW_400 = (59, 130, 246), (239, 68, 68), (16, 185, 129), (251, 191, 36)
VIEW = (800, 600)


def img(res: R.RenderResult) -> Image.Image:
    assert res.png is not None, res.error
    im = Image.open(io.BytesIO(res.png)).convert("RGB")
    assert im.size == (res.width, res.height)
    return im


def close_to(px, rgb, tol=3) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(px, rgb))


def colour_page(rgb, extra="") -> str:
    return f"<html><body style='margin:0;background:rgb{tuple(rgb)}'>{extra}</body></html>"


@pytest.fixture(scope="module")
def renderer():
    with R.Renderer(pool_size=3, viewport=VIEW, timeout_s=20) as r:  # generous: CI machines may be busy
        yield r


@pytest.fixture(scope="module")
def js_renderer():
    # Tight time limit: the pages here are tiny; the loop/never-loading cases cost about timeout_s each.
    with R.Renderer(pool_size=2, viewport=VIEW, timeout_s=5, javascript=True) as r:
        yield r


class HitCounter:
    """A real HTTP server on 127.0.0.1: any request that left the browser shows up in .hits."""

    def __init__(self):
        hits = self.hits = []
        conns = self.connections = []

        class H(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png" if self.path.endswith(".png") else "text/plain")
                self.end_headers()
                self.wfile.write(R.solid_png(50, 50, (255, 0, 0)) if self.path.endswith(".png") else b"leak")

            do_POST = do_GET

            def log_message(self, *a):
                pass

        class Server(ThreadingHTTPServer):
            def verify_request(self, request, client_address):  # every TCP connection, even one without a request
                conns.append(client_address)
                return True

        self.server = Server(("127.0.0.1", 0), H)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_server():
    s = HitCounter()
    yield s
    s.close()


# ---- no browser needed -------------------------------------------------------------------------------------------
def test_placeholder_sizes_and_png():
    assert R.placeholder_size("https://source.unsplash.com/random/400x300/?garden") == (400, 300)
    assert R.placeholder_size("https://via.placeholder.com/150x100") == (150, 100)
    assert R.placeholder_size("https://picsum.photos/240/160") == (240, 160)
    assert R.placeholder_size("https://picsum.photos/200") == (200, 200)
    assert R.placeholder_size("https://images.example.com/a.jpg?w=640&h=480") == (640, 480)
    assert R.placeholder_size("https://example.com/logo.png") == R.PLACEHOLDER_DEFAULT
    assert R.placeholder_size("https://x.com/5000x3000") == (R.PLACEHOLDER_MAX, R.PLACEHOLDER_MAX)
    png = R.solid_png(7, 5, (1, 2, 3))
    im = Image.open(io.BytesIO(png))
    assert im.size == (7, 5) == R.png_size(png) and im.convert("RGB").getpixel((6, 4)) == (1, 2, 3)


def test_tailwind_url_and_play_cdn_rewrite():
    m = R._TAILWIND_CSS_URL.match
    assert m("https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css")
    assert m("https://unpkg.com/tailwindcss@^2/dist/tailwind.min.css")
    assert m("https://cdnjs.cloudflare.com/ajax/libs/tailwindcss/2.2.19/tailwind.min.css")
    assert not m("https://cdn.jsdelivr.net/npm/bootstrap@5/dist/css/bootstrap.min.css")
    assert not m("https://evil.com/tailwindcss@2.2.19/dist/tailwind.min.css")
    out = R.rewrite_tailwind_scripts('<head><script src="https://cdn.tailwindcss.com?plugins=forms"></script></head>')
    assert "<script" not in out and R.TAILWIND_URL in out


@needs_tailwind
def test_tailwind_subset_keeps_exactly_the_rules_a_page_can_use():
    css = R.DEFAULT_TAILWIND_CSS.read_text()
    ts = R._tailwind_subset(R.DEFAULT_TAILWIND_CSS, css.encode())
    every = " ".join(c for rules in ts.by_class.values() for _, cs in rules for c in cs)
    assert ts.subset(every).decode() == css.split("*/", 2)[2]  # all classes: the whole file, byte for byte
    sub = ts.subset('<div class="md:w-1/2 hover:bg-blue-500 group-hover:text-white w-0.5 space-x-4">').decode()
    assert "@media (min-width:768px){.md\\:w-1\\/2{width:50%}}" in sub
    assert ".hover\\:bg-blue-500:hover{" in sub and ".w-0\\.5{" in sub and ".space-x-4>:not([hidden])" in sub
    assert "group-hover" not in sub  # needs the `group` class too
    assert "group-hover" in ts.subset('<a class="group"><b class="group-hover:text-white">').decode()
    assert ".bg-red-500" not in sub and "box-sizing:border-box" in sub and "@keyframes spin" in sub
    assert len(sub) < 20_000 < len(css)


def test_explicit_missing_executable_is_one_clear_error(tmp_path):
    with pytest.raises(R.BrowserUnavailable, match="not an executable"):
        R.find_chromium(tmp_path / "no-such-chromium")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="pool_size"):
        R.Renderer(pool_size=0)
    with pytest.raises(ValueError, match="max_height"):
        R.Renderer(viewport=(800, 600), max_height=100)


# ---- with a browser ----------------------------------------------------------------------------------------------
@needs_browser
@needs_tailwind
@pytest.mark.parametrize("fixture", ["tailwind_blocks.html", "tailwind_play_cdn.html"])
def test_tailwind_page_is_styled_from_the_local_copy(renderer, fixture):
    res = renderer.render((DATA / fixture).read_text())
    assert res.ok, res.error
    im = img(res)
    assert (res.width, res.height) == VIEW
    assert close_to(im.getpixel((400, 80)), BLUE_500)  # h-40 = 160 px of bg-blue-500 at the top
    if fixture == "tailwind_blocks.html":
        assert close_to(im.getpixel((100, 240)), RED_500) and close_to(im.getpixel((700, 240)), GREEN_500)
    else:
        assert close_to(im.getpixel((400, 170)), YELLOW_400)
    assert any("tailwind" in u and a.startswith("tailwind 2.2.19") for u, _, a in res.requests)


@needs_browser
@needs_tailwind
def test_tailwind_subset_renders_the_same_pixels_as_the_whole_file(renderer):
    pages = [p.read_text() for p in sorted(DATA.glob("*.html"))]
    with R.Renderer(pool_size=2, viewport=VIEW, tailwind_subset=False, timeout_s=30) as whole:
        full = whole.render_many(pages)
    sub = renderer.render_many(pages)
    assert [a.png == b.png for a, b in zip(sub, full)] == [True] * len(pages)
    assert all(a.ok and b.ok for a, b in zip(sub, full))


@needs_browser
def test_without_local_tailwind_renders_unstyled_and_warns_once(tmp_path):
    html = (DATA / "tailwind_blocks.html").read_text()
    with pytest.warns(RuntimeWarning, match="WITHOUT Tailwind"):
        r = R.Renderer(pool_size=1, viewport=VIEW, tailwind_css=tmp_path / "missing.css")
    with r:
        res = r.render(html)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same missing file again: no second warning
        R.Renderer(pool_size=1, viewport=VIEW, tailwind_css=tmp_path / "missing.css").close()
    assert res.ok, res.error
    assert not close_to(img(res).getpixel((400, 80)), BLUE_500)
    assert any(a == "blocked (no local tailwind)" for _, _, a in res.requests)


@needs_browser
def test_network_is_blocked_and_nothing_leaves(js_renderer, http_server):
    b = http_server.base
    html = f"""<html><head><link rel="stylesheet" href="{b}/style.css"><script src="{b}/lib.js"></script>
      <link rel="preconnect" href="{b}"><link rel="dns-prefetch" href="//leak.example">
      <link rel="prefetch" href="{b}/prefetch"><link rel="icon" href="{b}/favicon.ico">
      <style>@import url({b}/imported.css);
             @font-face {{ font-family: X; src: url({b}/font.woff2); }} p {{ font-family: X; }}</style></head>
      <body style="margin:0;background:rgb(0,0,255)"><p>text</p>
      <img src="{b}/photo.png" style="width:50px;height:50px">
      <iframe src="{b}/frame.html"></iframe><object data="{b}/object.swf"></object><embed src="{b}/embed">
      <video poster="{b}/poster.png" src="{b}/video.mp4"></video>
      <script>
        fetch("{b}/api").then(() => document.body.style.background = "rgb(255,0,0)").catch(() => {{}});
        try {{ new WebSocket("ws://127.0.0.1:{b.rsplit(':', 1)[1]}/ws"); }} catch (e) {{}}
        navigator.sendBeacon && navigator.sendBeacon("{b}/beacon", "x");
      </script></body></html>"""
    res = js_renderer.render(html)
    assert res.png is not None
    assert http_server.hits == [] and http_server.connections == []
    logged = {u: a for u, _, a in res.requests}
    for path in ("/style.css", "/lib.js", "/photo.png", "/frame.html", "/api", "/imported.css"):
        assert logged.get(b + path) in ("blocked", "placeholder 320x240", "navigation blocked"), (path, logged)
    assert logged[b + "/photo.png"].startswith("placeholder")  # images get the local grey placeholder
    im = img(res)
    assert close_to(im.getpixel((700, 500)), (0, 0, 255))  # the fetch() failed: background not turned red


@needs_browser
def test_requests_that_escape_interception_still_cannot_connect(http_server):
    """The second wall: a route handler that lets a request through still reaches nothing (dead proxy)."""

    class Leaky(R.Renderer):
        async def _route(self, slot, route):
            if route.request.url.startswith(http_server.base):
                slot.job.requests.append((route.request.url, route.request.resource_type, "continued"))
                try:
                    await route.continue_()
                except Exception:  # noqa: BLE001
                    pass
                return
            await super()._route(slot, route)

    with Leaky(pool_size=1, viewport=VIEW, timeout_s=5, javascript=True) as r:
        res = r.render(f"<body><img src='{http_server.base}/x.png'><script>fetch('{http_server.base}/f')</script>"
                       "</body>")
    assert any(a == "continued" for _, _, a in res.requests)
    assert http_server.hits == [] and http_server.connections == []


@needs_browser
def test_no_file_access(js_renderer, tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(R.solid_png(100, 100, (255, 0, 0)))
    html = f"""<body style="margin:0;background:rgb(0,255,0)">
      <img src="file://{secret}" style="display:block;width:100px;height:100px">
      <iframe src="file:///etc/hostname"></iframe>
      <script>fetch("file://{secret}").then(() => document.body.style.background = "rgb(255,0,0)")
                                      .catch(() => {{}});</script></body>"""
    res = js_renderer.render(html)
    im = img(res)
    assert not close_to(im.getpixel((50, 50)), (255, 0, 0))  # the host file's pixels never appear
    assert close_to(im.getpixel((700, 500)), (0, 255, 0))  # and fetch() of it failed


@needs_browser
def test_js_infinite_loop_gives_an_error_and_the_pool_recovers(js_renderer):
    before = js_renderer.slots_replaced
    loop = colour_page((255, 0, 0), "<script>while (true) {}</script>")
    late_loop = colour_page((255, 0, 0), "<script>setTimeout(() => { while (true) {} }, 0)</script>")
    for html in (loop, late_loop):
        res = js_renderer.render(html)
        assert res.error and ("unresponsive" in res.error or "timed out" in res.error), res.error
        assert res.elapsed_s < 4 * js_renderer.timeout_s
        assert res.png is not None and (res.width, res.height) == VIEW  # a defined (blank) image
        ok = js_renderer.render(colour_page((0, 128, 0)))
        assert ok.ok, ok.error
        assert close_to(img(ok).getpixel((10, 10)), (0, 128, 0))
    assert js_renderer.slots_replaced >= before + 2  # the stuck pages were discarded, not reused
    assert js_renderer.launches == 1


@needs_browser
def test_a_looping_page_does_not_block_the_others(js_renderer):
    pages = [colour_page((0, 0, 200)), colour_page((1, 1, 1), "<script>while(true){}</script>"),
             colour_page((0, 200, 0)), colour_page((200, 0, 0))]
    res = js_renderer.render_many(pages)
    assert [r.ok for r in res] == [True, False, True, True]
    for r, rgb in zip([res[0], res[2], res[3]], [(0, 0, 200), (0, 200, 0), (200, 0, 0)]):
        assert close_to(img(r).getpixel((5, 5)), rgb)


@needs_browser
def test_never_loading_resource_hits_the_time_limit():
    """A resource whose response never comes: the call ends after timeout_s with what the page shows."""

    class Slow(R.Renderer):
        async def _route(self, slot, route):
            if "never.test" in route.request.url:
                slot.job.requests.append((route.request.url, route.request.resource_type, "hanging"))
                await asyncio.sleep(3600)
            await super()._route(slot, route)

    with Slow(pool_size=1, viewport=VIEW, timeout_s=2) as r:
        res = r.render(colour_page((0, 0, 255), "<img src='https://never.test/slow.png'>"))
        assert res.error and "load timed out" in res.error
        assert 2 <= res.elapsed_s < 8
        assert close_to(img(res).getpixel((700, 500)), (0, 0, 255))  # what had loaded is still captured
        again = r.render(colour_page((0, 255, 0)))
        assert again.ok and close_to(img(again).getpixel((5, 5)), (0, 255, 0))


@needs_browser
@pytest.mark.parametrize("how", ["meta", "meta-delayed", "location", "popup", "about-blank", "alert"])
def test_redirects_and_popups_are_contained(js_renderer, how):
    head, body = "", ""
    if how == "meta":
        head = '<meta http-equiv="refresh" content="0;url=https://evil.example/">'
    elif how == "meta-delayed":
        head = '<meta http-equiv="refresh" content="0.2;url=https://evil.example/">'
        body = "<img src='https://picsum.photos/10/10'>" * 1
    elif how == "location":
        body = "<script>location = 'https://evil.example/';</script>"
    elif how == "popup":
        body = "<script>window.open('https://evil.example/pop');</script>"
    elif how == "about-blank":
        body = "<script>location = 'about:blank';</script>"
    elif how == "alert":  # a modal dialog would stop the page: dismissed
        body = "<script>alert('hi'); confirm('sure?'); prompt('name?');</script>"
    html = f"<html><head>{head}</head><body style='margin:0;background:rgb(0,0,255)'>{body}</body></html>"
    res = js_renderer.render(html)
    assert res.png is not None
    if how == "meta-delayed":  # may or may not fire before the capture; the page is kept either way
        assert res.error is None or "navigation blocked" in res.error
    elif how == "alert":
        assert res.ok, res.error
    elif how == "popup":
        assert res.error and "popup blocked" in res.error
    elif how == "about-blank":
        assert res.error and "left its content" in res.error
    else:
        assert res.error and "navigation blocked: https://evil.example/" in res.error
    if how != "about-blank":
        assert close_to(img(res).getpixel((400, 300)), (0, 0, 255))  # still the page's own content
    assert all(not u.startswith("https://evil.example") or a == "navigation blocked" for u, _, a in res.requests)
    ok = js_renderer.render(colour_page((0, 255, 0)))
    assert ok.ok and close_to(img(ok).getpixel((5, 5)), (0, 255, 0))


@needs_browser
def test_meta_refresh_is_blocked_with_javascript_off(renderer):
    res = renderer.render('<head><meta http-equiv="refresh" content="0;url=https://evil.example/x"></head>'
                          "<body style='background:rgb(0,0,255)'>page</body>")
    assert res.error and "navigation blocked" in res.error
    assert close_to(img(res).getpixel((400, 300)), (0, 0, 255))


@needs_browser
def test_enormous_document_is_clipped(renderer):
    tall = colour_page((0, 0, 255), "<div style='height:1000000px'></div><div style='height:100px'>end</div>")
    res = renderer.render(tall)
    assert res.ok and res.clipped
    assert (res.width, res.height) == (VIEW[0], renderer.max_height) == (800, 4 * 600)
    short = renderer.render(colour_page((0, 0, 255), "<div style='height:900px'></div>"))
    assert not short.clipped and short.height == 900  # shorter than max_height: the whole page
    wide = renderer.render(colour_page((0, 0, 255), "<div style='width:5000px;height:10px'></div>"))
    assert wide.width == VIEW[0]  # the width is always the viewport's


@needs_browser
def test_oversized_html_is_refused_with_a_blank_image(renderer):
    res = renderer.render("<p>x</p>" * (renderer.max_html_bytes // 8 + 1))
    assert res.error and "too large" in res.error
    assert (res.width, res.height) == VIEW and close_to(img(res).getpixel((5, 5)), (255, 255, 255))


@needs_browser
def test_render_many_keeps_order_and_reuses_one_browser(renderer):
    colours = [(i * 20, 255 - i * 20, (i * 53) % 256) for i in range(10)]
    created = renderer.slots_created
    res = renderer.render_many([colour_page(c) for c in colours])
    assert [close_to(img(r).getpixel((5, 5)), c) for r, c in zip(res, colours)] == [True] * 10
    assert renderer.launches == 1
    assert renderer.slots_created - created <= renderer.pool_size  # pages reused, never one per render


@needs_browser
def test_many_threads_share_one_renderer(renderer):
    out: dict[int, R.RenderResult] = {}

    def work(i):
        out[i] = renderer.render(colour_page((i * 40, 0, 0)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(out) == list(range(6))
    assert all(close_to(img(out[i]).getpixel((5, 5)), (i * 40, 0, 0)) for i in range(6))
    assert renderer.launches == 1


@needs_browser
def test_websight_fixture_pages_render(renderer):
    pages = [p.read_text() for p in sorted(DATA.glob("*.html"))]
    res = renderer.render_many(pages)
    for p, r in zip(sorted(DATA.glob("*.html")), res):
        assert r.ok, (p.name, r.error)
        assert r.width == VIEW[0] and VIEW[1] <= r.height <= renderer.max_height
    blog = res[[p.name for p in sorted(DATA.glob("*.html"))].index("blog.html")]
    assert {a for _, t, a in blog.requests if t == "image"} == {"placeholder 240x160"}


@needs_browser
def test_a_dead_browser_is_relaunched():
    with R.Renderer(pool_size=1, viewport=VIEW) as r:
        assert r.render(colour_page((0, 0, 255))).ok
        r._call(r._browser.close(), timeout=30)
        res = r.render(colour_page((0, 255, 0)))
        assert res.ok and close_to(img(res).getpixel((5, 5)), (0, 255, 0))
        assert r.launches == 2
    with pytest.raises(RuntimeError, match="closed"):
        r.render("<p>x</p>")


# ---- DOM capture (render(..., dom=True)) --------------------------------------------------------------------------
@needs_browser
@needs_tailwind
def test_dom_capture_matches_the_tailwind_page(renderer):
    html = ("<html><head><link rel='stylesheet' href='" + R.TAILWIND_URL + "'></head><body class='bg-white'>"
            "<h1 class='text-4xl font-bold text-red-600'>Hello   world</h1>"
            "<p class='text-base text-gray-700 text-center'>Some text</p>"
            "<div class='bg-blue-500 h-20 w-40'></div></body></html>")
    res = renderer.render(html, dom=True)
    assert res.ok, res.error
    assert res.dom["page"] == {"width": VIEW[0], "height": VIEW[1], "background": "rgb(255, 255, 255)"}
    blocks = {b["tag"]: b for b in res.dom["blocks"]}
    assert set(blocks) == {"h1", "p", "div"}
    h1, p, div = blocks["h1"], blocks["p"], blocks["div"]
    assert (h1["text"], h1["font_weight"], h1["color"], h1["font_size"]) == ("Hello world", "700", "rgb(220, 38, 38)",
                                                                            36)
    assert (h1["x"], h1["y"], h1["w"], h1["h"]) == (0, 0, VIEW[0], 40)  # text-4xl: line-height 2.5rem
    assert (p["text"], p["color"], p["font_size"], p["text_align"]) == ("Some text", "rgb(55, 65, 81)", 16, "center")
    assert (div["background"], div["w"], div["h"], div["text"]) == ("rgb(59, 130, 246)", 160, 80, "")
    # One page state: the screenshot shows the block where the DOM says it is, and asking for the DOM changes no pixel.
    assert close_to(img(res).getpixel((div["x"] + 80, div["y"] + 40)), BLUE_500)
    plain = renderer.render(html)
    assert plain.ok and plain.dom is None and plain.png == res.png


@needs_browser
def test_dom_is_per_call_and_kept_in_order(renderer):
    pages = [colour_page((0, 0, 255), f"<p>page {i}</p>") for i in range(4)]
    res = renderer.render_many(pages, dom=True)
    assert [r.dom["blocks"][0]["text"] for r in res] == [f"page {i}" for i in range(4)]
    assert all(r.dom["page"]["background"] == "rgb(0, 0, 255)" for r in res)
    assert all(r.dom is None for r in renderer.render_many(pages[:2]))
    refused = renderer.render("<p>x</p>" * (renderer.max_html_bytes // 8 + 1), dom=True)
    assert refused.error and refused.dom is None  # failure results carry no DOM


@needs_browser
def test_dom_of_an_enormous_document_is_bounded(renderer):
    html = colour_page((255, 255, 255), "<p>row</p>" * 20_000 + "<div style='height:1000000px'></div>")
    res = renderer.render(html, dom=True)
    assert res.ok and res.clipped, res.error
    assert res.elapsed_s < 2 * renderer.timeout_s
    assert len(res.dom["blocks"]) == MAX_BLOCKS and res.dom["page"]["height"] > 1_000_000


@needs_browser
@pytest.mark.parametrize("hostile", ["loop", "dom-loop", "dom-throws", "dom-garbage"])
def test_dom_capture_of_a_hostile_page_is_defined_and_bounded(js_renderer, hostile):
    script = {"loop": "while (true) {}",  # never loads: a failed render, no DOM
              "dom-loop": "window.getComputedStyle = () => { while (true) {} };",  # spins only when the DOM is read
              "dom-throws": "window.getComputedStyle = () => { throw new Error('no'); };",
              "dom-garbage": "Array.prototype.push = function () { return 0; }; "
                             "Object.defineProperty(Array.prototype, 'slice', {value: () => 'x'});"}[hostile]
    before = js_renderer.slots_replaced
    res = js_renderer.render(colour_page((0, 0, 255), f"<p>hi</p><script>{script}</script>"), dom=True)
    assert res.elapsed_s < 4 * js_renderer.timeout_s
    assert res.png is not None and (res.width, res.height) == VIEW
    if hostile == "loop":
        assert res.error and res.dom is None
    else:
        assert res.ok, res.error  # the screenshot stands
        assert close_to(img(res).getpixel((700, 500)), (0, 0, 255))
        assert res.dom is None or (isinstance(res.dom["blocks"], list) and len(res.dom["blocks"]) <= MAX_BLOCKS)
    if hostile in ("loop", "dom-loop", "dom-throws"):
        assert res.dom is None
    if hostile in ("loop", "dom-loop"):
        assert js_renderer.slots_replaced > before  # the stuck page is not reused
    ok = js_renderer.render(colour_page((0, 128, 0), "<p>fine</p>"), dom=True)
    assert ok.ok and ok.dom["blocks"][0]["text"] == "fine"


class _PlaywrightShot(R.Renderer):
    """The screenshot as it was taken before sweet/render/_shot.py: Playwright's own page.screenshot."""

    async def _capture(self, slot):
        await self._await_ready(slot)  # a reused document's readiness, which sweet's capture checks in its evaluate
        return await self._capture_playwright(slot.page)


@needs_browser
def test_cdp_capture_gives_the_pixels_of_playwrights_screenshot(renderer):
    # The fixtures plus what Playwright's screenshot prepares for: an autofocused input (caret hidden), finite and
    # infinite animations (finished / cancelled), a same-origin iframe, a tall (clipped) and a wide document.
    anim = ("<style>@keyframes s{to{transform:rotate(90deg)}}.a{animation:s 1s linear infinite}"
            ".b{animation:s 5s 1}</style>")
    htmls = [p.read_text() for p in sorted(DATA.glob("*.html"))] + [
        f"<html><body>{anim}<input autofocus value='x'><div class=a>spin</div><div class=b>once</div></body></html>",
        "<iframe srcdoc=\"<input autofocus><p style='animation:x 1s infinite'>in a frame</p>\"></iframe>",
        "<div style='height:9000px;background:linear-gradient(red,blue)'>tall</div>",
        "<div style='height:700px;width:1500px;background:green'>wide</div>", "<p>tiny</p>"]
    with _PlaywrightShot(pool_size=2, viewport=VIEW, timeout_s=20) as old:
        before = old.render_many(htmls)
    after = renderer.render_many(htmls)
    for i, (a, b) in enumerate(zip(before, after)):
        assert a.ok and b.ok, (i, a.error, b.error)
        # Chromium's fast PNG encoder (_shot.FAST_PNG): other bytes, the same image.
        assert R.same_pixels(a.png, b.png), i
        assert (a.width, a.height, a.clipped) == (b.width, b.height, b.clipped), i
    assert after[-3].clipped and after[-3].height == renderer.max_height


def test_same_pixels_decodes_rather_than_compares_bytes():
    def png(last, level):
        buf = io.BytesIO()
        pixels = bytearray(range(256)) * 12  # 32 x 32 RGB
        pixels[-1] = last
        Image.frombytes("RGB", (32, 32), bytes(pixels)).save(buf, "PNG", compress_level=level)  # 0: not compressed
        return buf.getvalue()

    fast, small, other = png(9, 0), png(9, 9), png(10, 0)
    assert fast != small and R.same_pixels(fast, small)
    assert not R.same_pixels(fast, other) and not R.same_pixels(fast, None) and R.same_pixels(None, None)


@needs_browser
@needs_tailwind
def test_reused_document_renders_as_a_fresh_navigation():
    # JavaScript off: after its first page a slot replaces its document's content instead of navigating
    # (_slots._rewrite); the PNGs must be those of a first, navigated page, and each page's requests still logged.
    pages = [(DATA / "tailwind_blocks.html").read_text(), colour_page((0, 255, 0)), (DATA / "blog.html").read_text()]
    with R.Renderer(pool_size=1, viewport=VIEW) as r:
        got = [r.render(h) for h in pages + pages]
        assert r.slots_created == 1
    fresh = []
    for h in pages:
        with R.Renderer(pool_size=1, viewport=VIEW) as one:
            fresh.append(one.render(h))
    assert all(x.ok for x in got + fresh)
    assert [x.png for x in got] == [x.png for x in fresh + fresh]
    assert close_to(img(got[4]).getpixel((400, 300)), (0, 255, 0))
    for x in (got[3], got[5]):
        assert any(a.startswith("tailwind 2.2.19") for _, _, a in x.requests)
    assert {a for _, t, a in got[5].requests if t == "image"} == {"placeholder 240x160"}


@needs_browser
def test_an_autofocus_page_renders_alike_on_a_fresh_and_a_reused_slot():
    # A rewritten document keeps its "autofocus processed" flag, so on a reused slot the field stayed unfocused
    # (no focus ring) where a fresh slot focused it: the same page gave two PNGs depending on the slot's history.
    page = "<html><body><input autofocus value='x'><p>form</p></body></html>"
    framed = "<iframe srcdoc=\"<input autofocus><p>in a frame</p>\"></iframe>"
    with R.Renderer(pool_size=1, viewport=VIEW) as r:
        got = [r.render(h) for h in (colour_page((0, 0, 255)), page, framed, page)]
    fresh = []
    for h in (page, framed):
        with R.Renderer(pool_size=1, viewport=VIEW) as one:
            fresh.append(one.render(h))
    assert all(x.ok for x in got + fresh)
    assert [x.png for x in got[1:]] == [fresh[0].png, fresh[1].png, fresh[0].png]


@needs_browser
@needs_tailwind
def test_a_reused_document_whose_capture_check_fails_is_polled_then_captured(monkeypatch):
    # A reused document's readiness rides in the capture's evaluate; when that check fails (a late `load` event of
    # the previous document let _rewrite go on early), the page must be left untouched, polled, then captured:
    # the PNG of a fresh navigation. The stand-in fails each page's first check, as such a late event would.
    from sweet.render import _slots

    real, failed = _slots.capture, []

    async def first_check_fails(page, cdp, viewport, max_height, check=None):
        if check is not None and len(failed) < 2:
            failed.append(check)
            return _slots.NOT_READY
        return await real(page, cdp, viewport, max_height, check)

    monkeypatch.setattr(_slots, "capture", first_check_fails)
    pages = [colour_page((0, 0, 255)), (DATA / "tailwind_blocks.html").read_text(), (DATA / "blog.html").read_text()]
    with R.Renderer(pool_size=1, viewport=VIEW) as r:
        got = [r.render(h) for h in pages]
    monkeypatch.setattr(_slots, "capture", real)
    fresh = []
    for h in pages[1:]:
        with R.Renderer(pool_size=1, viewport=VIEW) as one:
            fresh.append(one.render(h))
    assert len(failed) == 2 and all(x.ok for x in got + fresh)
    assert [x.png for x in got[1:]] == [x.png for x in fresh]


def test_a_disabled_tailwind_link_does_not_hold_a_reused_document():
    # A disabled <link> never loads its sheet: the reused-document path must not wait for it (it would time out).
    tw = '<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css">'
    off = tw.replace('rel="stylesheet"', 'rel="stylesheet" disabled')
    page = f'<html><head>{tw}{off}</head><body><div class="bg-red-500 p-8">x</div></body></html>'
    with R.Renderer(pool_size=1, viewport=VIEW, timeout_s=3) as r:
        first, second = r.render(page), r.render(page)
    assert first.ok and second.ok and second.png == first.png, second.errors
