"""Parent side plumbing of :mod:`sweet.sandbox`: start one confined child, talk to it, kill its group.

Policy (limits, which layers, what a result means) stays in ``sandbox``; this module only runs the protocol
described in ``_child`` and returns raw, not yet decoded, results.
"""

from __future__ import annotations

import functools
import itertools
import json
import marshal
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD_SCRIPT = os.path.join(HERE, "_child.py")
CONFINE_SCRIPT = os.path.join(HERE, "_confine.py")
FINGERPRINT_FILES = ("_child.py", "_confine.py", "_server.py")  # run by path, not imported: see sweet.codehash
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONUTF8": "1",
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # no threads: NPROC=0
_CAP_DAC_READ_SEARCH = 1 << 2
_SYS_RO = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/usr/share/zoneinfo", "/etc/localtime",
           "/etc/ld.so.cache")
_DEVS = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
_uid_counter = itertools.count()


def _world_accessible(path: str) -> bool:
    path = os.path.realpath(path)
    while True:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
        if not mode & (stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


@functools.cache
def keep_caps() -> int | None:
    """None when we cannot drop privileges (not root); else the capability mask the child keeps when it has no
    private root (where the whitelisted dirs hang under 0755 dirs of its own, it keeps none)."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    paths = [sys.executable, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    return 0 if all(_world_accessible(p) for p in paths) else _CAP_DAC_READ_SEARCH


def sandbox_ids() -> tuple[int, int]:
    """An unused uid per concurrent child (unique within this process; spread by pid across processes)."""
    n = 200_000 + (os.getpid() % 4000) * 1000 + next(_uid_counter) % 1000
    return n, n


@functools.cache
def confine_code() -> bytes:
    """The confinement module, compiled once here and shipped to each child (saves ~3 ms of compiling there)."""
    with open(CONFINE_SCRIPT, encoding="utf-8") as fh:
        return marshal.dumps(compile(fh.read(), CONFINE_SCRIPT, "exec"))


@functools.cache
def whitelist(site: bool) -> tuple[list[str], list[str]]:
    """(read-only paths, device files) a child may see: the import dirs of the child's interpreter that lie under
    its prefixes (a .pth pointing at the project is not one; site-packages only with ``site``) and the system
    libraries its extension modules link.  Leaves keep symlinks (recreated in the private root) and their
    targets are listed too; nothing above a leaf is a symlink."""
    probe = "import json, sys; print(json.dumps([sys.path, [sys.prefix, sys.base_prefix, sys.exec_prefix]]))"
    argv = [sys.executable, "-s", "-P", "-B", *([] if site else ["-S"]), "-c", probe]
    paths, prefixes = json.loads(subprocess.run(argv, capture_output=True, env=ENV, timeout=60, check=True).stdout)
    prefixes = {os.path.realpath(p).rstrip("/") + "/" for p in prefixes}
    ro = [p for p in paths if os.path.isdir(p) and any((os.path.realpath(p) + "/").startswith(x) for x in prefixes)]
    if not site:
        ro = [p for p in ro if "-packages" not in p]
    out: list[str] = []
    for p in ro + list(_SYS_RO):
        if not os.path.lexists(p):
            continue
        q = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        for x in (q, os.path.realpath(q)):
            if x not in out and os.path.exists(x):
                out.append(x)
    return out, [d for d in _DEVS if os.path.exists(d)]


def exit_reason(rc: int | None) -> str:
    if rc is None:
        return "killed"
    if rc < 0:
        return "cpu limit" if -rc == signal.SIGXCPU else f"crashed (signal {-rc})"
    return "refused to run (sandbox setup failed)" if rc == 70 else f"exited (code {rc})"


def kill(proc: subprocess.Popen, grace_s: float = 0.0) -> int | None:
    """SIGKILL the child's whole group and reap it; ``grace_s``: first give it that long to exit on its own (so
    the reason is its own exit status), watching a pidfd, which does not reap: the pgid stays ours."""
    if grace_s > 0 and proc.returncode is None and hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:
            pass
        else:
            try:
                select.select([pidfd], [], [], grace_s)
            finally:
                os.close(pidfd)
    if proc.returncode is not None:  # already reaped: its pgid may belong to someone else now
        return proc.returncode
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # before any wait(): the pgid cannot have been recycled yet
    except (ProcessLookupError, PermissionError):
        pass
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def _frame(obj) -> bytes:
    data = marshal.dumps(obj)
    return len(data).to_bytes(4, "big") + data


def converse(kill_child, rfd: int, wfd: int, first: dict, calls: list[str], timeout_s: float, grace_s: float,
             max_line: int):
    """Send the code, then each call with a fresh nonce once the previous result is in.  Returns (fatal, results,
    stop, layers): fatal = the code itself failed; results = raw (ok, value|reason) for a prefix of the calls;
    stop = why the next call failed (None if all done); layers = the confinement the child reported.
    ``kill_child(grace_s)`` kills the child's group (after grace_s to exit by itself) and returns its exit code."""
    os.set_blocking(wfd, False)
    out, writing = bytearray(_frame(first)), False
    poller = select.poll()
    poller.register(rfd, select.POLLIN)
    buf, ready, results, nonce, layers = bytearray(), False, [], None, None

    def fail(before: str, after: str):
        return (before, results, None, layers) if not ready else (None, results, after, layers)

    deadline = time.monotonic() + grace_s + timeout_s
    while True:
        if bool(out) != writing:
            writing = bool(out)
            if writing:
                poller.register(wfd, select.POLLOUT)
            else:
                poller.unregister(wfd)
        left = deadline - time.monotonic()
        if left <= 0:
            return fail("timeout", "timeout")
        events = dict(poller.poll(left * 1000))
        if wfd in events:
            try:
                del out[: os.write(wfd, out)]
            except BlockingIOError:
                pass
            except OSError:  # the child closed its end: stop sending, wait for it to exit or time out
                out.clear()
        if rfd not in events:
            continue
        chunk = os.read(rfd, 1 << 16)
        if not chunk:
            reason = exit_reason(kill_child(min(1.0, max(0.0, deadline - time.monotonic()))))
            return fail(reason, reason)
        buf += chunk
        while (nl := buf.find(b"\n")) >= 0:
            line, buf = bytes(buf[:nl]), buf[nl + 1 :]
            try:
                msg = json.loads(line)
                if layers is None:  # written before the answer's code ran: trustworthy
                    layers = [str(x) for x in msg["iso"]]
                    continue
                if not ready:
                    if isinstance(msg.get("fatal"), str):
                        return msg["fatal"][:200], results, None, layers
                    if msg.get("ready") != 1:
                        raise ValueError
                    ready = True
                elif nonce is None or msg.get("n") != nonce:  # forged, duplicated, late or out of order
                    raise ValueError
                elif msg.get("ok") == 1 and "v" in msg:
                    results.append((True, msg["v"]))
                elif msg.get("ok") == 0 and isinstance(msg.get("e"), str):
                    results.append((False, msg["e"][:200]))
                else:
                    raise ValueError
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                return fail("protocol error", "bad result")
            if len(results) == len(calls):
                return None, results, None, layers
            nonce = secrets.token_hex(16)
            out += _frame((nonce, calls[len(results)]))
            deadline = time.monotonic() + timeout_s
        if len(buf) > max_line:
            return fail("output too large", "result too large")


def spawn(code: str, calls: list[str], cfg: dict, timeout_s: float, grace_s: float):
    """Run ``code`` and ``calls`` in one new child (see ``converse`` for what comes back)."""
    site = cfg["site"]
    cfg = {**cfg, "ro": whitelist(site)[0], "devs": whitelist(site)[1], "keep_caps": keep_caps() or 0}
    if keep_caps() is not None:
        cfg["uid"], cfg["gid"] = sandbox_ids()
    tmp = tempfile.mkdtemp(prefix="sweet-sbx-")
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    proc = None
    try:
        if cfg.get("uid") is not None:
            os.chown(tmp, cfg["uid"], cfg["gid"])
        argv = [sys.executable, "-s", "-P", "-B", *([] if site else ["-S"]), CHILD_SCRIPT, str(req_r), str(res_w)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=tmp, env=ENV, pass_fds=(req_r, res_w), start_new_session=True)
        os.close(req_r)
        os.close(res_w)
        req_r = res_w = -1
        first = {"code": code, "cfg": cfg, "confine": confine_code()}
        return converse(functools.partial(kill, proc), res_r, req_w, first, calls, timeout_s, grace_s,
                        cfg["max_line"])
    finally:
        for fd in (req_r, req_w, res_r, res_w):
            if fd >= 0:
                os.close(fd)
        if proc is not None:
            kill(proc)
        for _ in range(2):  # no mount namespace: the answer may have chmod'ed its own files; make them deletable
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.exists(tmp):
                subprocess.run(["chmod", "-R", "u+rwx", tmp], capture_output=True)
