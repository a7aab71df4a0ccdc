"""Run model-written ColBench backend answers against hidden tests, never in this process.

Design (see also ``_sandbox_child.py``, the only code that runs next to the answer):
* One child process per answer; all calls run in it in order.  When a call times out or the child dies (segfault,
  ``os._exit``), the group is killed and a fresh child re-executes the code for the *remaining* calls, so one
  looping input costs only its own budget.  One child per call would be simpler but costs ~10x the process
  starts (a start is ~15-25 ms of CPU); a restart is only paid for tests that already failed.
* The child gets the code and the call expressions on stdin and writes one JSON line per call to a dedicated pipe
  (``pass_fds``); its stdout/stderr are /dev/null, so printing cannot forge results and output volume is free.
  Values use a tagged encoding of plain builtins, decoded here by a strict parser (no eval/pickle); anything else
  becomes :class:`Unsupported`, which equals nothing.  Comparison is Python ``==`` on decoded values.  Expected
  values come from running the reference the same way in a separate child, so the answer's child never sees them.
* Confinement: new session (``os.killpg`` at the end, always), temp cwd (deleted), clean env, rlimits (CPU, AS,
  FSIZE, CORE=0, NPROC=0, NOFILE).  When we are root the child also enters an empty network namespace and drops
  to a per-child unused uid with no_new_privs (keeping only CAP_DAC_READ_SEARCH when the interpreter is not
  world-readable, e.g. under /root), so it cannot write project files, signal us or other answers, or fork.
  Not root: NPROC=0 still blocks fork, sockets are refused at import, but files of our own user are writable.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import marshal
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger(__name__)

CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_child.py")
STARTUP_GRACE_S = 5.0  # interpreter start + confinement, on top of timeout_s for executing the answer's body
MAX_LINE = 1 << 20  # one encoded result; also the cap on buffered, unterminated child output
MAX_DEPTH = 110
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONUTF8": "1",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # no threads: NPROC=0
_CAP_DAC_READ_SEARCH = 1 << 2
_uid_counter = itertools.count()


@dataclass
class TestReport:
    __test__ = False  # not a pytest class
    passed: int
    total: int
    errors: list[str | None]
    error: str | None = None

    @property
    def reward(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def success(self) -> bool:
        return self.total > 0 and self.passed == self.total


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def strip_code_fences(text: str) -> str:
    """Code inside the first ```python (else first ```) fence; unfenced text is returned unchanged."""
    blocks = _FENCE.findall(text or "")
    if not blocks:
        return text or ""
    for lang, body in blocks:
        if lang.lower() in ("python", "python3", "py"):
            return body
    return blocks[0][1]


class Unsupported:
    """A value the encoding does not carry (custom class, generator, ...): equal to nothing, not even itself."""

    __slots__ = ("name",)
    __hash__ = object.__hash__

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return False

    def __repr__(self):
        return f"<unsupported type {self.name}>"


_HEX_INT = re.compile(r"-?[0-9a-f]+")
_SEQ = {"l": list, "t": tuple, "S": set, "F": frozenset}


def _decode(x, depth: int = 0):
    if x is None or type(x) is bool:
        return x
    if depth > MAX_DEPTH or type(x) is not list or len(x) != 2 or type(x[0]) is not str:
        raise ValueError("bad value")
    tag, p = x
    if type(p) is str:
        if tag == "i" and _HEX_INT.fullmatch(p):
            return int(p, 16)
        if tag == "f":
            return float(p)
        if tag == "c":
            return complex(p)
        if tag == "s":
            return p
        if tag == "b":
            return bytes.fromhex(p)
        if tag == "ba":
            return bytearray.fromhex(p)
        if tag == "u":
            return Unsupported(p[:80])
    elif type(p) is list:
        if tag in _SEQ:
            return _SEQ[tag](_decode(y, depth + 1) for y in p)
        if tag == "d" and all(type(kv) is list and len(kv) == 2 for kv in p):
            return {_decode(k, depth + 1): _decode(v, depth + 1) for k, v in p}
    raise ValueError("bad value")


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
def _keep_caps() -> int | None:
    """None when we cannot drop privileges (not root); else the capability mask the child keeps."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    paths = [sys.executable, CHILD_SCRIPT, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    return 0 if all(_world_accessible(p) for p in paths) else _CAP_DAC_READ_SEARCH


def _sandbox_ids() -> tuple[int, int]:
    """An unused uid per concurrent child (unique within this process; spread by pid across processes)."""
    n = 200_000 + (os.getpid() % 4000) * 1000 + next(_uid_counter) % 1000
    return n, n


def _exit_reason(rc: int | None) -> str:
    if rc is None:
        return "killed"
    if rc < 0:
        return "cpu limit" if -rc == signal.SIGXCPU else f"crashed (signal {-rc})"
    return "refused to run (sandbox setup failed)" if rc == 70 else f"exited (code {rc})"


def _kill(proc: subprocess.Popen) -> int | None:
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


_warned = False


def _collect(proc, fd: int, n: int, timeout_s: float):
    """Read the child's result lines.  Returns (fatal, results, stop): fatal = the code itself failed; results =
    decoded (ok, value|reason) for a prefix of the calls; stop = reason the next call failed (None if all done)."""
    global _warned
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    buf, ready, results = bytearray(), False, []
    deadline = time.monotonic() + STARTUP_GRACE_S + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return ("timeout", results, None) if not ready else (None, results, "timeout")
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            reason = _exit_reason(_kill(proc))
            return (reason, results, None) if not ready else (None, results, reason)
        buf += chunk
        while (nl := buf.find(b"\n")) >= 0:
            line, buf = bytes(buf[:nl]), buf[nl + 1 :]
            try:
                msg = json.loads(line)
                if not ready:
                    if isinstance(msg.get("fatal"), str):
                        return msg["fatal"][:200], results, None
                    if msg.get("ready") != 1:
                        raise ValueError
                    ready = True
                    if not msg.get("iso") and _keep_caps() is not None and not _warned:
                        _warned = True
                        log.warning("sandbox: could not drop privileges; running answers as root")
                elif msg.get("i") != len(results):
                    raise ValueError
                elif msg.get("ok") == 1:
                    results.append((True, _decode(msg["v"])))
                elif msg.get("ok") == 0 and isinstance(msg.get("e"), str):
                    results.append((False, msg["e"][:200]))
                else:
                    raise ValueError
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError, OverflowError):
                return ("protocol error", results, None) if not ready else (None, results, "bad result")
            deadline = time.monotonic() + timeout_s
            if len(results) == n:
                return None, results, None
        if len(buf) > MAX_LINE:
            return ("output too large", results, None) if not ready else (None, results, "result too large")


def _child(code: str, calls: list[str], timeout_s: float, memory_mb: int, site: bool):
    keep = _keep_caps()
    uid, gid = _sandbox_ids() if keep is not None else (None, None)
    cfg = {"uid": uid, "gid": gid, "keep_caps": keep or 0, "memory_mb": int(memory_mb), "fsize": 1 << 20,
           "cpu_s": int(timeout_s * (len(calls) + 1) + STARTUP_GRACE_S) + 1, "max_line": MAX_LINE}
    payload = marshal.dumps({"code": code, "calls": calls, "cfg": cfg})
    tmp = tempfile.mkdtemp(prefix="sweet-sbx-")
    r, w = os.pipe()
    proc = None
    try:
        if uid is not None:
            os.chown(tmp, uid, gid)
        argv = [sys.executable, "-s", "-P", "-B", *([] if site else ["-S"]), CHILD_SCRIPT, str(w)]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=tmp, env=_ENV, pass_fds=(w,), start_new_session=True)
        os.close(w)
        w = -1
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except OSError:
            pass
        return _collect(proc, r, len(calls), timeout_s)
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)
        if proc is not None:
            _kill(proc)
        for _ in range(2):  # not root: the answer may have chmod'ed its own files; make them deletable, retry
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.exists(tmp):
                subprocess.run(["chmod", "-R", "u+rwx", tmp], capture_output=True)


def _run(code: str, calls: list[str], timeout_s: float = 2.0, memory_mb: int = 512, site: bool = False):
    """(fatal, per-call results).  Restarts a fresh child after a call that timed out or killed its child."""
    calls = list(calls)
    out: list[tuple[bool, object]] = []
    while len(out) < len(calls):
        fatal, res, stop = _child(code, calls[len(out):], timeout_s, memory_mb, site)
        if fatal is not None:
            if not out:
                return fatal, [(False, fatal)] * len(calls)
            res, stop = [], fatal
        out += res
        if stop is not None:
            out.append((False, stop))
            if stop == "bad result":  # the child speaks garbage: do not keep restarting it
                out += [(False, stop)] * (len(calls) - len(out))
    return None, out


def run_calls(code: str, calls: list[str], *, timeout_s: float = 2.0, memory_mb: int = 512,
              site: bool = False) -> list[tuple[bool, object | str]]:
    """Execute ``code`` then each call expression in a sandboxed child: per call (True, value) or (False, reason).
    ``site=True`` also exposes site-packages (off by default: ColBench functions are stdlib-only)."""
    return _run(code, calls, timeout_s, memory_mb, site)[1]


_REF_CACHE: OrderedDict[str, Future] = OrderedDict()
_REF_CACHE_MAX = 4096
_REF_LOCK = threading.Lock()


def _expected(reference: str, tests: list[str], limits: dict):
    """Reference outputs, computed once per (reference, tests, limits) even under concurrent callers."""
    key = hashlib.sha256(json.dumps([reference, list(tests), sorted(limits.items())]).encode()).hexdigest()
    with _REF_LOCK:
        fut, owner = _REF_CACHE.get(key), False
        if fut is None:
            fut, owner = Future(), True
            _REF_CACHE[key] = fut
            while len(_REF_CACHE) > _REF_CACHE_MAX:
                _REF_CACHE.popitem(last=False)
        else:
            _REF_CACHE.move_to_end(key)
    if owner:
        try:
            fut.set_result(_run(reference, tests, **limits))
        except BaseException as e:
            with _REF_LOCK:
                _REF_CACHE.pop(key, None)
            fut.set_exception(e)
    return fut.result()


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. RecursionError on pathological nesting
        return False


def evaluate_answer(answer: str, reference: str, test_cases: list[str], **limits) -> TestReport:
    """Score ``answer`` (code fences stripped) on ``test_cases`` against ``reference``'s outputs."""
    tests, n = list(test_cases), len(test_cases)
    code = strip_code_fences(answer)
    if not code.strip():
        return TestReport(0, n, ["empty answer"] * n, "empty answer")
    ref_fatal, expected = _expected(reference, tests, limits)
    if ref_fatal is not None:
        return TestReport(0, n, [f"reference failed: {ref_fatal}"] * n, f"reference failed: {ref_fatal}")
    fatal, got = _run(code, tests, **limits)
    if fatal is not None:
        return TestReport(0, n, [fatal] * n, fatal)
    errors: list[str | None] = []
    for (ok_r, exp), (ok_a, val) in zip(expected, got):
        if not ok_r:
            errors.append(f"reference failed: {exp}")
        elif not ok_a:
            errors.append(val)
        else:
            errors.append(None if _same(val, exp) else "wrong answer")
    return TestReport(sum(e is None for e in errors), n, errors, None)


def evaluate_many(items: list[tuple[str, str, list[str]]], *, workers: int = os.cpu_count() or 1,
                  **limits) -> list[TestReport]:
    """``evaluate_answer`` over (answer, reference, tests) items, in parallel, results in input order."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(lambda it: evaluate_answer(it[0], it[1], it[2], **limits), items))
