#!/usr/bin/env python
"""Throughput of frontend page rendering: one pooled browser vs a browser launched per render.

Pages are the WebSight-style fixtures in tests/data/frontend/, expanded to --pages distinct variants (colour
classes and text swapped).  Modes, pages per second side by side:

  pooled (pool=N)        one sweet.render.Renderer, render_many over all pages, N pages at once
  pooled (pool=1)        one page at a time
  pooled, whole tailwind pool=N, but every page is sent the whole 2.9 MB Tailwind file instead of its subset
  pooled, pw screenshot  pool=N, screenshots by Playwright's page.screenshot (before sweet/render/_shot.py)
  browser per render     a fresh Renderer (Playwright driver + Chromium launch + page) for every page

Start-up of the pooled renderer is reported separately and not counted in its pages/s (it is paid once per
process).  The ratio column is pages/s relative to "browser per render".  The last column counts pages whose PNG
decodes to the per-render one's pixels (rendering is deterministic, so pooling must not change a pixel; Playwright's
own screenshot encodes the same pixels into other bytes than sweet's fast PNG encoding).

  python bench/render_throughput.py                      # 20 pages, pool 4 (~1 min on 2 cores)
  python bench/render_throughput.py --pages 40 --pool 8 --javascript
  python bench/render_throughput.py --profile            # + per-phase ms and CPU ms per page by process
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweet import render as R  # noqa: E402


class PlaywrightShot(R.Renderer):
    """The screenshot step as it was before sweet/render/_shot.py (same pixels, ~8 round trips)."""

    async def _capture(self, slot):
        await self._await_ready(slot)  # a reused document's readiness, which sweet's capture checks in its evaluate
        return await self._capture_playwright(slot.page)

FIXTURES = ROOT / "tests" / "data" / "frontend"
SWAPS = [("blue", "indigo"), ("indigo", "purple"), ("gray", "gray"), ("yellow", "green"), ("pink", "red"),
         ("purple", "blue"), ("green", "yellow"), ("red", "pink")]


def pages(n: int) -> list[str]:
    base = [p.read_text() for p in sorted(FIXTURES.glob("*.html"))]
    if not base:
        sys.exit(f"no fixture pages under {FIXTURES}")
    out = []
    for i in range(n):
        html = base[i % len(base)]
        k = i // len(base)
        if k:
            a, b = SWAPS[k % len(SWAPS)]
            html = re.sub(rf"\b(bg|text|border)-{a}-", rf"\1-{b}-", html)
            html = html.replace("</body>", f"<p class='p-4 text-sm'>variant {k}</p></body>")
        out.append(html)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--pages", type=int, default=20, help="number of pages (default 20)")
    ap.add_argument("--pool", type=int, default=4, help="pool size of the pooled mode (default 4)")
    ap.add_argument("--viewport", default="1280x720", help="WxH (default 1280x720)")
    ap.add_argument("--javascript", action="store_true", help="render with JavaScript on")
    ap.add_argument("--per-render-pages", type=int, default=None,
                    help="pages for the slow per-render mode (default: all)")
    ap.add_argument("--executable-path", default=None, help="Chromium binary (default: found automatically)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile the pooled modes: per-phase wall ms and CPU ms per page by process")
    args = ap.parse_args(argv)
    vw, vh = (int(x) for x in args.viewport.lower().split("x"))
    ok, why = R.browser_available(args.executable_path)
    if not ok:
        print(f"no browser: {why}", file=sys.stderr)
        return 2
    htmls = pages(args.pages)
    kw = dict(viewport=(vw, vh), javascript=args.javascript, executable_path=args.executable_path)
    print(f"{len(htmls)} pages, viewport {vw}x{vh}, javascript {'on' if args.javascript else 'off'}, "
          f"browser {why}, {os.cpu_count()} CPUs")

    rows, profiles = [], []
    t = time.perf_counter()
    pooled = R.Renderer(pool_size=args.pool, **kw)
    start_s = time.perf_counter() - t
    try:
        pooled.render(htmls[0])  # warm-up: first context, Tailwind parsed once by the process
        for name, pool, extra in ((f"pooled (pool={args.pool})", args.pool, {}), ("pooled (pool=1)", 1, {}),
                                  ("pooled, whole tailwind", args.pool, {"tailwind_subset": False}),
                                  ("pooled, pw screenshot", args.pool, {"cls": PlaywrightShot})):
            extra = dict(extra)
            cls = extra.pop("cls", R.Renderer)
            r = pooled if pool == args.pool and not extra and cls is R.Renderer else cls(pool_size=pool, **kw, **extra)
            try:
                if r is not pooled:
                    r.render(htmls[0])
                if args.profile:
                    from _render_profile import CpuMeter, PhaseTimer, instrument
                    timer, cpu = PhaseTimer(), CpuMeter()
                    instrument(r, timer)
                    before = cpu.sample()
                t = time.perf_counter()
                res = r.render_many(htmls)
                dt = time.perf_counter() - t
                if args.profile:
                    profiles.append(f"== {name}\n{timer.report(len(htmls))}\n"
                                    f"{CpuMeter.report(before, cpu.sample(), len(htmls), dt)}")
                rows.append((name, len(htmls), dt, res, r.launches))
            finally:
                if r is not pooled:
                    r.close()
    finally:
        pooled.close()

    n_single = min(len(htmls), args.per_render_pages or len(htmls))
    single = []
    t = time.perf_counter()
    for h in htmls[:n_single]:
        with R.Renderer(pool_size=1, **kw) as r:
            single.append(r.render(h))
    dt = time.perf_counter() - t
    rows.append(("browser per render", n_single, dt, single, n_single))

    base_rate = n_single / dt
    print(f"pooled renderer start-up: {start_s:.2f} s (once per process)\n")
    print(f"{'mode':<22}{'pages':>6}{'seconds':>9}{'pages/s':>9}{'ratio':>7}{'launches':>10}{'errors':>8}"
          f"{'same image':>12}")
    for name, n, secs, res, launches in rows:
        errors = sum(1 for x in res if x.error)
        same = sum(1 for a, b in zip(res, single) if R.same_pixels(a.png, b.png))
        print(f"{name:<22}{n:>6}{secs:>9.2f}{n / secs:>9.2f}{(n / secs) / base_rate:>6.1f}x{launches:>10}"
              f"{errors:>8}{same:>9}/{min(n, n_single)}")
    if profiles:
        print("\nprofile (wall ms are inflated by anything else running; CPU ms much less so):")
        print(*profiles, sep="\n\n")
    bad = [x.error for _, _, _, res, _ in rows for x in res if x.error]
    if bad:
        print("\nerrors:", *sorted(set(bad))[:5], sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
