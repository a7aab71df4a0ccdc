"""Parent side of the fork servers of :mod:`sweet.sandbox` (see ``_server`` for the server and its protocol).

Spawning an interpreter and confining it again costs ~15-20 ms of CPU per answer; a fork server pays for the
interpreter, the namespaces and the private root once and then forks one child per answer (~2 ms of CPU in the
child before the answer runs, ~5 ms per 10-test answer in all, measured on a loaded 2-core machine).  The child confines
itself further (own mount+IPC namespaces and tmpfs cwd, Landlock, its own uid, seccomp, rlimits) and the parent
talks to it over two fresh pipes with ``_proc.converse``, exactly as to a spawned child.

* One server serves one answer at a time; a thread checks one out per child and returns it after, so there are
  as many servers as answers ever ran at once (idle ones wait for the next batch; at most ``MAX_IDLE`` kept).
* Only for layer 1 (root with the mount namespace requested); elsewhere ``run`` returns None and the caller
  spawns one interpreter per answer, as it also does when a server cannot start (logged once per setup).
* A server that dies (killed, crashed, or silent for ``REPLY_S``) raises ``ServerDied``; the answer in flight
  is re-run from scratch once on a fresh server (and spawned if that one dies too): no answer is lost.
* No server outlives us: ``shutdown`` (also at exit) closes their sockets (they kill their namespace and exit)
  and kills what is left; if we die, the sockets close anyway.
"""
from __future__ import annotations

import atexit
import logging
import marshal
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading

from sweet.sandbox import _proc

log = logging.getLogger("sweet.sandbox")

SERVER_SCRIPT = os.path.join(_proc.HERE, "_server.py")
START_S = 30.0  # interpreter start + namespaces + private root, on a loaded machine
REPLY_S = 10.0  # a server that takes longer than this (beyond the grace asked) to reap a child is replaced
MAX_IDLE = 32

_lock = threading.Lock()
_idle: dict[tuple, list[Server]] = {}
_live: set[Server] = set()
_failed: set[tuple] = set()
_atexit = False


class ServerDied(Exception):
    pass


class Server:
    """One fork server: the process we started (its pid is ``pid``) and our end of its control socket."""

    def __init__(self, key: tuple, site: bool, work_mb):
        self.key, self.dead, self.layers = key, False, None
        ro, devs = _proc.whitelist(site)
        tmp = tempfile.mkdtemp(prefix="sweet-sbx-")  # the server's cwd: where each child's tmpfs goes
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        try:
            argv = [sys.executable, "-s", "-P", "-B", *([] if site else ["-S"]), SERVER_SCRIPT, str(theirs.fileno())]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, cwd=tmp, env=_proc.ENV,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
            theirs.close()
            self.pid = self.proc.pid
            ours.sendall(marshal.dumps({"ro": ro, "devs": devs, "work_mb": work_mb, "uid": None, "gid": None}))
            reply = marshal.loads(self._recv(START_S) or marshal.dumps({"error": "no reply"}))
            if "layers" not in reply:
                raise OSError(reply.get("error", "bad reply"))
            self.layers = [str(x) for x in reply["layers"]]
        except BaseException:
            theirs.close()
            self.close()
            raise
        finally:
            try:
                os.rmdir(tmp)  # the server has its own view of it; here it is an empty dir no longer needed
            except OSError:
                pass

    def _recv(self, timeout: float) -> bytes:
        if not select.select([self.sock], [], [], timeout)[0]:
            return b""
        try:
            return self.sock.recv(1 << 16)
        except OSError:
            return b""

    def fork(self, req_r: int, res_w: int) -> None:
        try:
            socket.send_fds(self.sock, [b"F"], [req_r, res_w])
        except OSError as e:
            self.kill()
            raise ServerDied(f"fork server {self.pid}: {e}") from e

    def reap(self, grace: float) -> int | None:
        """Have the server kill and reap the current child (after ``grace`` s to exit by itself): its exit code."""
        try:
            self.sock.send(b"K" + repr(float(grace)).encode())
            reply = self._recv(grace + REPLY_S)
        except OSError:
            reply = b""
        if reply[:1] != b"X":
            self.kill()
            raise ServerDied(f"fork server {self.pid} died")
        return None if reply[1:] == b"None" else int(reply[1:])

    def kill(self) -> None:
        self.dead = True
        try:
            self.proc.kill()  # its init dies of PDEATHSIG, which kills every process of its pid namespace
        except OSError:
            pass
        self.close()

    def close(self, wait_s: float = 5.0) -> None:
        """Stop it: closing the socket makes it kill its namespace and exit; kill it if it does not."""
        self.dead = True
        self.sock.close()
        proc = getattr(self, "proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with _lock:
            _live.discard(self)


def _checkout(key: tuple, site: bool, work_mb) -> Server | None:
    global _atexit
    with _lock:
        if key in _failed:
            return None
        pool = _idle.get(key)
        if pool:
            return pool.pop()
        if not _atexit:
            atexit.register(shutdown)
            _atexit = True
    try:
        srv = Server(key, site, work_mb)
    except (OSError, ValueError, EOFError, subprocess.SubprocessError) as e:
        with _lock:
            _failed.add(key)
        log.warning("sandbox: the fork server cannot start here (%s); spawning one interpreter per answer "
                    "(~10x slower, same isolation)", e)
        return None
    with _lock:
        _live.add(srv)
    return srv


def _checkin(srv: Server) -> None:
    with _lock:
        pool = _idle.setdefault(srv.key, [])
        if not srv.dead and len(pool) < MAX_IDLE:
            pool.append(srv)
            return
    srv.close()


def _once(srv: Server, code: str, calls: list[str], cfg: dict, timeout_s: float, grace_s: float):
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    done: list[int | None] = []

    def stop(grace: float):
        if not done:
            done.append(srv.reap(grace))
        return done[0]

    try:
        srv.fork(req_r, res_w)
        os.close(req_r)
        os.close(res_w)
        req_r = res_w = -1
        out = _proc.converse(stop, res_r, req_w, {"code": code, "cfg": cfg}, calls, timeout_s, grace_s,
                             cfg["max_line"])
        stop(0.0)
        return out
    finally:
        for fd in (req_r, req_w, res_r, res_w):
            if fd >= 0:
                os.close(fd)
        if not done and not srv.dead:  # an exception other than ServerDied: still kill the child
            try:
                stop(0.0)
            except ServerDied:
                pass


def run(code: str, calls: list[str], cfg: dict, timeout_s: float, grace_s: float):
    """``_proc.spawn``'s result, computed in a child of a fork server; None where no server can be had here (or
    two died under this answer): the caller then spawns."""
    work_mb = cfg.get("work_mb")
    if _proc.keep_caps() is None or not cfg.get("mountns") or type(work_mb) is not int:
        return None  # layer 1 only; the other layers keep the spawning path (and its tests) as they were
    key = (bool(cfg["site"]), work_mb)
    cfg = {**cfg, "ro": _proc.whitelist(cfg["site"])[0], "devs": _proc.whitelist(cfg["site"])[1],
           "keep_caps": _proc.keep_caps() or 0}
    cfg["uid"], cfg["gid"] = _proc.sandbox_ids()
    for attempt in range(2):
        srv = _checkout(key, cfg["site"], work_mb)
        if srv is None:
            return None
        try:
            out = _once(srv, code, calls, cfg, timeout_s, grace_s)
        except ServerDied as e:
            log.warning("sandbox: %s; %s", e, "re-running the answer on a fresh one" if not attempt else
                        "spawning the answer instead")
            srv.close(wait_s=1.0)
            continue
        _checkin(srv)
        return out
    return None


def server_pids() -> list[int]:
    """Pids of the live fork servers (the processes we started), for tests and diagnostics."""
    with _lock:
        return sorted(s.pid for s in _live)


def shutdown() -> None:
    """Stop every fork server (idle or not) and forget failed setups; the next answer starts new ones."""
    with _lock:
        servers = list(_live)
        _idle.clear()
        _failed.clear()
    for srv in servers:
        srv.close()
