"""Where one pooled render's time goes (``bench/render_throughput.py --profile``).

Two views, because wall time on a loaded machine is inflated by whatever else runs there:
  * per-phase wall ms (mean over pages): the renderer's steps and the Playwright calls inside them, timed by
    wrapping them here (the renderer itself carries no profiling code);
  * CPU ms per page of each process (this Python, Playwright's node driver, Chromium's browser / GPU / renderer /
    other processes), read from /proc before and after: robust to load, and it is what bounds pages/s on 2 cores.
"""
from __future__ import annotations

import collections
import functools
import time

import psutil


_current: "PhaseTimer | None" = None  # Playwright's classes are wrapped once; their calls go to the latest timer


def _wrap_async(obj, name: str, label: str, timer_of) -> None:
    fn = getattr(obj, name)

    @functools.wraps(fn)
    async def timed(*a, **kw):
        t = time.perf_counter()
        try:
            return await fn(*a, **kw)
        finally:
            timer = timer_of()
            if timer is not None:
                timer.ms[label].append((time.perf_counter() - t) * 1000)
    setattr(obj, name, timed)


class PhaseTimer:
    def __init__(self):
        self.ms: dict[str, list[float]] = collections.defaultdict(list)

    def report(self, n_pages: int) -> str:
        lines = [f"{'phase (wall, mean over calls)':<34}{'calls':>7}{'ms/call':>9}{'ms/page':>9}"]
        for k, v in self.ms.items():
            lines.append(f"{k:<34}{len(v):>7}{sum(v) / len(v):>9.1f}{sum(v) / n_pages:>9.1f}")
        return "\n".join(lines)


def instrument(renderer, timer: PhaseTimer) -> None:
    """Time the renderer's steps and the Playwright page calls they make (every page of every slot)."""
    global _current
    from playwright.async_api import CDPSession, Page
    _current = timer
    for name in ("_acquire", "_load", "_capture", "_render_in", "_release"):
        _wrap_async(renderer, name, name, lambda: timer)
    for cls, names in ((Page, ("goto", "wait_for_load_state", "evaluate", "screenshot")), (CDPSession, ("send",))):
        for name in names:
            if not getattr(cls, f"_sweet_wrapped_{name}", False):
                _wrap_async(cls, name, f"  {cls.__name__}.{name}", lambda: _current)
                setattr(cls, f"_sweet_wrapped_{name}", True)


def _kind(p: psutil.Process) -> str:
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return "gone"
    exe = " ".join(cmd[:1])
    if "node" in exe or any("playwright" in c and c.endswith(".js") for c in cmd[:3]):
        return "node driver"
    typ = next((c.split("=", 1)[1] for c in cmd if c.startswith("--type=")), None)
    if typ is None:
        return "chromium browser" if "chrom" in exe else exe[-20:]
    if typ == "utility":
        sub = next((c.split("=", 1)[1] for c in cmd if c.startswith("--utility-sub-type=")), "")
        return f"chromium utility ({sub.split('.')[-2] if '.' in sub else sub})"
    return f"chromium {typ}"


class CpuMeter:
    """CPU seconds of this process and all its descendants, by kind; processes that exit mid-run are counted by
    what they had used when last seen."""

    def __init__(self):
        self.me = psutil.Process()
        self.last: dict[int, tuple[str, float]] = {}

    def sample(self) -> dict[str, float]:
        procs = [self.me] + self.me.children(recursive=True)
        for p in procs:
            try:
                t = p.cpu_times()
                kind = "python (this)" if p.pid == self.me.pid else _kind(p)
                self.last[p.pid] = (kind, t.user + t.system)
            except psutil.Error:
                pass
        out: dict[str, float] = collections.defaultdict(float)
        for kind, s in self.last.values():
            out[kind] += s
        return out

    @staticmethod
    def report(before: dict[str, float], after: dict[str, float], n_pages: int, wall_s: float) -> str:
        lines = [f"{'process (CPU)':<34}{'ms/page':>9}"]
        total = 0.0
        for k in sorted(after, key=lambda k: -(after[k] - before.get(k, 0))):
            d = after[k] - before.get(k, 0)
            total += d
            if d > 0.0005 * n_pages:
                lines.append(f"{k:<34}{d * 1000 / n_pages:>9.1f}")
        lines.append(f"{'total CPU':<34}{total * 1000 / n_pages:>9.1f}   (wall {wall_s * 1000 / n_pages:.1f} ms/page; "
                     f"2 cores bound pages/s at {2 * n_pages / total:.1f})")
        return "\n".join(lines)
