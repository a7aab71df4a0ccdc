"""Run model-written ColBench backend answers against hidden tests, never in this process.

Design (``_proc`` starts and talks to children, ``_pool`` keeps the fork servers; ``_child``, ``_confine`` and
``_server`` are the only code that runs next to the answer):
* Fork servers (``_pool``, ``_server``; layer 1 below, i.e. root): starting an interpreter and confining it is
  most of an answer's cost (~15 ms), so each concurrent worker gets one server that has done the costly part once
  (interpreter, ``_child``/``_confine`` loaded, net+mount+pid namespaces, the private root) and forks one child
  per answer; only that child confines itself further (its own mount+IPC namespaces and fresh tmpfs cwd,
  Landlock, its own uid, seccomp, rlimits) and then runs the answer; the server never runs answer code.  The
  child keeps only its two pipes, the parent talks to it as to a spawned one, and the server kills everything in
  its pid namespace after each answer.  A server that dies is replaced and the answer in flight re-run once; a
  server that cannot start (a layer refused), other layers, or ``FORK_SERVER = False`` spawn one interpreter
  per answer (``_proc.spawn``, the same child code and protocol).  ``shutdown()`` (also at exit) stops them.
* One child process per answer; all calls run in it in order.  When a call times out or the child dies (segfault,
  ``os._exit``), the group is killed and a fresh child re-executes the code for the *remaining* calls, so one
  looping input costs only its own budget.  One child per call would be simpler but costs ~10x the process
  starts (a start is ~15-25 ms of CPU); a restart is only paid for tests that already failed.
* Protocol: the parent sends the code, then one call at a time with a fresh random nonce, each only after the
  previous result arrived; it accepts exactly one JSON line per call, in order, carrying that call's nonce, and
  ends the run on anything else ("bad result").  The answer can find the result pipe, but cannot produce a line
  for a call before that call was sent, so forging is worth no more than returning a value.  stdout/stderr are
  /dev/null: printing forges nothing and output volume is free.  Values use a tagged encoding of plain builtins,
  decoded here by a strict parser (no eval/pickle; sets/dicts of keys crafted to share a hash are refused);
  anything else becomes :class:`Unsupported`, which equals nothing.  Comparison is Python ``==`` on decoded
  values.  Expected values come from running the reference the same way in a separate child.
* Scoring (``SCORINGS``): "strict" as above; "official" reproduces the released SWEET-RL ``check_correctness``
  (banned substrings, its fence split, code re-executed per call with top-level names invisible to its
  functions, 1 s per answer call, a reference value of None never passes: ``_official``).  Same children, same
  confinement: only the child's exec scope and the parent's comparison differ.
* Confinement (``protections()`` lists the layers in force; details in ``_confine``), by fallback order:
  1. root (here and in CI): netns + mountns + Landlock + uid drop + seccomp (+ pidns and ipcns under the fork
     server: the answer sees only itself and the server's init, and no IPC object of an earlier answer).  The
     child sees only read-only binds of its interpreter's stdlib and the system libraries; its cwd is a private
     32 MB tmpfs; the project, /tmp, /dev/shm, /proc (so /proc/<parent>/environ) and home dirs do not exist for
     it and a disk cannot be filled; no network; it runs as a per-child unused uid with no capabilities and
     no_new_privs, so it cannot signal us or other answers.  A layer the kernel or a container refuses is
     skipped; the others still apply.
  2. not root, Linux >= 5.13 (Landlock, probed with the syscall; /sys/kernel/security/lsm may be absent): reads
     only under the same whitelist, writes only under the cwd; ABI >= 4 no TCP bind/connect; ABI >= 6 no
     signals or abstract unix sockets outside the sandbox.  Weaker than 1: the cwd is on the real disk (files
     <= 1 MB each, their count unbounded), UDP is only refused at import (no netns), no uid of its own.
  3. not root, no Landlock: files of our own user are readable and writable and our processes can be
     signalled through ctypes (a warning is logged once).
  Any user on x86_64: a seccomp filter fails fork/clone/exec, namespaces, mounts, chroot, ptrace, bpf, io_uring,
  userfaultfd, keyrings, perf... with EPERM (less kernel to attack).
  Always: new session (``os.killpg`` at the end; under the fork server, SIGKILL to all of its pid namespace but
  itself), temp cwd (deleted), clean env, rlimits (CPU, AS, FSIZE,
  CORE=0, NPROC=0: no fork and no threads, NOFILE), os.fork/system/kill... stubs (speed bumps only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sweet.sandbox import _official, _pool, _proc

log = logging.getLogger(__name__)

STARTUP_GRACE_S = 5.0  # interpreter start + confinement, on top of timeout_s for executing the answer's body
MAX_LINE = 1 << 20  # one encoded result; also the cap on buffered, unterminated child output
MAX_DEPTH = 110
MAX_SAME_HASH = 64  # keys of one set/dict sharing a hash value
USE_MOUNTNS = True  # layers that can be turned off (tests use this to exercise the fallbacks)
USE_LANDLOCK = True
WORK_MB = 32  # size of the private tmpfs cwd when the mount namespace is in force
FORK_SERVER = True  # False: spawn one interpreter per answer even where a fork server could run (bench, debugging)
# How answers are scored: "strict" (this project's rules, below) or "official" (the released check_correctness:
# see ``_official``).  Both run in the same confined children; only the exec scope and the comparison differ.
SCORINGS = ("strict", "official")


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
        if tag in ("l", "t"):
            return _SEQ[tag](_decode(y, depth + 1) for y in p)
        if tag in ("S", "F"):
            return _SEQ[tag](_hashable([_decode(y, depth + 1) for y in p]))
        if tag == "d" and all(type(kv) is list and len(kv) == 2 for kv in p):
            keys = _hashable([_decode(k, depth + 1) for k, _ in p])
            return dict(zip(keys, (_decode(v, depth + 1) for _, v in p)))
    raise ValueError("bad value")


def _hashable(keys: list) -> list:
    """Refuse set/dict keys crafted to share a hash (e.g. multiples of 2**61 - 1): building them here would take
    quadratic time while holding the GIL, stalling every other evaluation in this process."""
    seen: dict[int, int] = {}
    for k in keys:
        h = hash(k)
        seen[h] = seen.get(h, 0) + 1
        if seen[h] > MAX_SAME_HASH:
            raise ValueError("colliding keys")
    return keys


_warned: set[str] = set()


def _warn_once(layers: list[str]) -> None:
    missing = []
    if _proc.keep_caps() is not None and "uid" not in layers:
        missing.append("could not drop privileges; running answers as root")
    if "mountns" not in layers and not any(x.startswith("landlock") for x in layers):
        missing.append("no filesystem confinement (neither a mount namespace nor Landlock); answers can read and "
                       "write whatever this user can")
    for m in missing:
        if m not in _warned:
            _warned.add(m)
            log.warning("sandbox: %s", m)


def _child(code: str, calls: list[str], timeout_s: float, memory_mb: int, site: bool, scope: str = "shared"):
    """One child for ``calls``: (fatal, decoded (ok, value|reason) for a prefix of the calls, stop, layers).
    ``scope``: "shared" (the code runs once, every call sees its namespace) or "per_call" (the released
    semantics: each call execs the code anew, top-level names apart from its functions' globals)."""
    cfg = {"memory_mb": int(memory_mb), "fsize": 1 << 20, "max_line": MAX_LINE, "site": bool(site),
           "cpu_s": int(timeout_s * (len(calls) + 1) + STARTUP_GRACE_S) + 1,
           "mountns": USE_MOUNTNS, "landlock": USE_LANDLOCK, "work_mb": WORK_MB, "scope": scope}
    got = _pool.run(code, calls, cfg, timeout_s, STARTUP_GRACE_S) if FORK_SERVER else None
    fatal, raw, stop, layers = got or _proc.spawn(code, calls, cfg, timeout_s, STARTUP_GRACE_S)
    if layers is not None:
        _warn_once(layers)
    results = []
    for ok, v in raw:
        try:
            results.append((True, _decode(v)) if ok else (False, v))
        except (ValueError, TypeError, RecursionError, OverflowError):
            return fatal, results, "bad result", layers
    return fatal, results, stop, layers


def _run(code: str, calls: list[str], timeout_s: float = 2.0, memory_mb: int = 512, site: bool = False,
         scope: str = "shared"):
    """(fatal, per-call results).  Restarts a fresh child after a call that timed out or killed its child."""
    calls = list(calls)
    out: list[tuple[bool, object]] = []
    while len(out) < len(calls):
        fatal, res, stop, _ = _child(code, calls[len(out):], timeout_s, memory_mb, site, scope)
        if fatal is not None:
            if not out:
                return fatal, [(False, fatal)] * len(calls)
            res, stop = [], fatal
        out += res
        if stop is not None:
            out.append((False, stop))
            if stop == "bad result":  # the child speaks garbage or forges: do not keep restarting it
                out += [(False, stop)] * (len(calls) - len(out))
    return None, out


def shutdown() -> None:
    """Stop the fork servers now (they are also stopped at exit; the next answer starts new ones)."""
    _pool.shutdown()


def protections(site: bool = False) -> list[str]:
    """The confinement layers a child gets here, e.g. ``['netns', 'mountns', 'landlock7', 'uid', 'seccomp']``."""
    return _child("", ["None"], 2.0, 512, site)[3] or []


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


def _reference_limits(scoring: str, limits: dict) -> dict:
    """How the reference runs under ``scoring`` (also its cache key: strict and official values never mix)."""
    return {**limits, "scope": "per_call"} if scoring == "official" else limits


def evaluate_answer(answer: str, reference: str, test_cases: list[str], *, scoring: str = "strict",
                    **limits) -> TestReport:
    """Score ``answer`` (code fences stripped) on ``test_cases`` against ``reference``'s outputs.

    ``scoring`` "strict": the code runs once per child, every call sees its namespace, a test passes when the
    answer's value equals the reference's (None included).  "official": the released rules (``_official``): banned
    substrings score 0, the released fence split, the code re-executed per call with top-level names invisible
    to its functions (the reference too), 1 s per answer call, and a reference value of None never passes."""
    if scoring not in SCORINGS:
        raise ValueError(f"unknown scoring {scoring!r}; choose one of {SCORINGS}")
    tests, n = list(test_cases), len(test_cases)
    official = scoring == "official"
    if official and (word := _official.banned(answer or "")):
        return TestReport(0, n, [f"refused: contains {word!r}"] * n, f"refused: contains {word!r}")
    code = _official.strip_fences(answer or "") if official else strip_code_fences(answer)
    if not code.strip():
        return TestReport(0, n, ["empty answer"] * n, "empty answer")
    ref_limits = _reference_limits(scoring, limits)
    ref_fatal, expected = _expected(reference, tests, ref_limits)
    if ref_fatal is not None:
        return TestReport(0, n, [f"reference failed: {ref_fatal}"] * n, f"reference failed: {ref_fatal}")
    # The reference keeps the configured budget (the released code gave it none); only the answer has the alarm.
    fatal, got = _run(code, tests, **({**ref_limits, "timeout_s": _official.CALL_TIMEOUT_S} if official else limits))
    if fatal is not None:
        return TestReport(0, n, [fatal] * n, fatal)
    errors: list[str | None] = []
    for (ok_r, exp), (ok_a, val) in zip(expected, got):
        if not ok_r:
            errors.append(f"reference failed: {exp}")
        elif official and exp is None:
            errors.append("reference returned None")
        elif not ok_a:
            errors.append(val)
        else:
            errors.append(None if _same(val, exp) else "wrong answer")
    return TestReport(sum(e is None for e in errors), n, errors, None)


def evaluate_many(items: list[tuple[str, str, list[str]]], *, workers: int | None = None, scoring: str = "strict",
                  **limits) -> list[TestReport]:
    """``evaluate_answer`` over (answer, reference, tests) items, in parallel (``workers`` children at a time,
    default ``os.cpu_count()``; each waits on its own child, so a looping answer holds one worker for its own
    budget only), results in input order.  The distinct references run first, all in parallel, so that answers
    to the same task do not leave workers waiting on one reference child."""
    if not items:
        return []
    if scoring not in SCORINGS:
        raise ValueError(f"unknown scoring {scoring!r}; choose one of {SCORINGS}")
    workers = workers or os.cpu_count() or 1
    refs = list(dict.fromkeys((ref, tuple(tests)) for _, ref, tests in items))
    ref_limits = _reference_limits(scoring, limits)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        for _ in pool.map(lambda rt: _expected(rt[0], list(rt[1]), ref_limits), refs):
            pass
        return list(pool.map(lambda it: evaluate_answer(it[0], it[1], it[2], scoring=scoring, **limits), items))
