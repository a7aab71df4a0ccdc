"""One real Prefect server for a test session: `prefect server start` as a subprocess in its own process group,
ready once its /api/health answers, stopped with TERM and then KILL of the whole group.

Prefect's ephemeral server (what a flow starts when no PREFECT_API_URL is set) gives up after a fixed, short
start-up wait and can outlive the process that started it when that wait runs out; this one waits as long as it is
told to, says why when it cannot start (with the tail of its log), and never outlives `stop()`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

STARTUP_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prefect_cli() -> list[str]:
    exe = Path(sys.executable).with_name("prefect")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("prefect")
    if not found:
        raise RuntimeError("the `prefect` command is not installed next to this Python nor on PATH")
    return [found]


class PrefectServer:
    """`with PrefectServer(home) as url:` or `start()` / `stop()`. `home` holds its database and its log."""

    def __init__(self, home: Path, startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.home = Path(home)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = self.home / "server.log"
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(PREFECT_HOME=str(self.home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                   PREFECT_SERVER_UI_ENABLED="false", PREFECT_UI_ENABLED="false")
        atexit.register(self.stop)  # a last resort; the session fixture calls stop() itself
        deadline = time.monotonic() + self.startup_timeout_s
        for attempt in range(3):  # the free port may be taken between choosing it and the server binding it
            self.port = free_port()
            with open(self.log_path, "ab") as log:
                log.write(f"--- attempt {attempt + 1}: port {self.port}\n".encode())
                log.flush()
                # The scheduler and late-run services are for deployments; the event and task-run recorders
                # (task run states come from events) stay on, as in the ephemeral server.
                self.proc = subprocess.Popen(
                    _prefect_cli() + ["server", "start", "--host", "127.0.0.1", "--port", str(self.port), "--no-ui",
                                      "--no-scheduler", "--no-late-runs", "--analytics-off", "--log-level", "WARNING"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.home,
                    start_new_session=True,  # its own session and process group: stop() signals the whole group
                    preexec_fn=_term_when_parent_dies)  # and a pytest killed outright (OOM, SIGKILL) takes it along
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if self._healthy():
                    return self.api_url
                time.sleep(0.25)
            else:
                self.stop()
                raise RuntimeError(f"the test Prefect server did not answer {self.api_url}/health within "
                                   f"{self.startup_timeout_s:.0f} s (machine overloaded?). Log tail "
                                   f"({self.log_path}):\n{self.log_tail()}")
            code = self.proc.returncode
            self.stop()
            if "already in use" not in self.log_tail(5):
                break
        raise RuntimeError(f"the test Prefect server exited with code {code} before it answered. Log tail "
                           f"({self.log_path}):\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)  # pgid == pid (start_new_session); also reaches anything it started
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:  # the leader is gone; anything left in its group goes too
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _term_when_parent_dies() -> None:  # in the child, between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
