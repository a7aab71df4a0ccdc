"""Finding and launching the Chromium the renderer (sweet/render/__init__.py) drives.

Split out of render.py so that where the browser comes from (an explicit path, $SWEET_CHROMIUM, Playwright's own,
the system's) and how it is started (the network-killing flags) read in one place, apart from the pool that uses it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("sweet.render")  # the package logger, whichever module logs

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


class BrowserUnavailable(RuntimeError):
    """No Chromium could be found or launched."""


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


async def launch_chromium(pw, executable_path: str | None):
    """Start headless Chromium with LAUNCH_ARGS through the Playwright driver `pw`; returns (browser, executable
    used: None = Playwright's own).  Playwright's own browser falls back to a system one (e.g. only part of
    Playwright's browsers is installed); raises BrowserUnavailable when nothing starts."""
    kw = {"headless": True, "args": LAUNCH_ARGS}
    if executable_path:
        kw["executable_path"] = executable_path
    try:
        return await pw.chromium.launch(**kw), executable_path
    except Exception as e:
        system = None if executable_path else _system_chromium()
        if system is None:
            raise BrowserUnavailable(f"could not launch Chromium ({executable_path or 'playwright'}): "
                                     f"{str(e).splitlines()[0]}") from e
        log.warning("Playwright's own Chromium did not start (%s); using %s", str(e).splitlines()[0], system)
        return await launch_chromium(pw, system)
