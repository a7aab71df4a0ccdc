"""Child side of :mod:`sweet.colbench.sandbox`.  Runs UNTRUSTED model-written code.

Started as ``python -S -P -B _sandbox_child.py RESULT_FD`` in a fresh session and temp cwd; reads one marshal'ed
request ``{"code", "calls", "cfg"}`` (trusted: written by the parent) from stdin, confines itself (netns, uid drop, rlimits, stubs), executes the code, then
evaluates each call and writes one JSON line per call to RESULT_FD (the answer's stdout/stderr go to /dev/null).
Everything after ``exec(code)`` is assumed compromised: the parent decodes strictly and never sees expected values
here.  Stdlib only; never import this module from the pipeline.
"""
import marshal
import os
import sys

import _json  # C string escaper; `json` itself would pull in `re` (~10 ms per child)

_DENY = ("fork", "forkpty", "system", "popen", "execv", "execve", "posix_spawn", "posix_spawnp", "kill", "killpg")


def _dump(x):
    """Minimal JSON writer for what this script emits: None/bool/int/str/list/dict-with-str-keys."""
    if x is None or x is True or x is False:
        return "null" if x is None else "true" if x else "false"
    if type(x) is int:
        return str(x)
    if type(x) is str:
        return _json.encode_basestring_ascii(x)
    if type(x) is list:
        return "[" + ",".join(map(_dump, x)) + "]"
    return "{" + ",".join(_json.encode_basestring_ascii(k) + ":" + _dump(v) for k, v in x.items()) + "}"


def _emit(fd, obj, max_line):
    data = (_dump(obj) + "\n").encode()
    if len(data) > max_line:
        data = (_dump({**{k: obj[k] for k in ("i",) if k in obj}, "ok": 0, "e": "result too large"}) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _reason(e):
    try:
        msg = str(e)
    except BaseException:
        msg = ""
    name = type(e).__name__
    return (f"{name}: {msg}" if msg else name)[:200]


def _encode(v, depth=0):
    """Tagged plain-value encoding; base-class methods so subclass overrides cannot change what is reported."""
    if depth > 100:
        raise RecursionError("result nested too deeply")
    if v is None or v is True or v is False:
        return v
    d = depth + 1
    if isinstance(v, int):
        return ["i", int.__format__(v, "x")]
    if isinstance(v, float):
        return ["f", float.__repr__(v)]
    if isinstance(v, complex):
        return ["c", complex.__repr__(v)]
    if isinstance(v, str):
        return ["s", str.__str__(v)]
    if isinstance(v, (bytes, bytearray)):
        return ["ba" if isinstance(v, bytearray) else "b", bytes(v).hex()]
    if isinstance(v, list):
        return ["l", [_encode(x, d) for x in list.__iter__(v)]]
    if isinstance(v, tuple):
        return ["t", [_encode(x, d) for x in tuple.__iter__(v)]]
    if isinstance(v, dict):
        return ["d", [[_encode(k, d), _encode(x, d)] for k, x in dict.items(v)]]
    if isinstance(v, frozenset):
        return ["F", [_encode(x, d) for x in frozenset.__iter__(v)]]
    if isinstance(v, set):
        return ["S", [_encode(x, d) for x in set.__iter__(v)]]
    try:
        name = str(type.__dict__["__name__"].__get__(type(v)))[:80]
    except BaseException:
        name = "?"
    return ["u", name]


def _confine(cfg):
    """As root: private empty network namespace, drop to an unprivileged uid (keeping at most the capability
    mask the parent asks for, e.g. CAP_DAC_READ_SEARCH when the interpreter lives under /root), no_new_privs.
    Returns True when the uid drop succeeded."""
    if os.geteuid() != 0 or cfg.get("uid") is None:
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare(0x40000000)  # CLONE_NEWNET; best effort (loopback down, no routes)
    try:
        libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS
        uid, gid = cfg["uid"], cfg["gid"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)

        class Hdr(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("eff", ctypes.c_uint32), ("perm", ctypes.c_uint32), ("inh", ctypes.c_uint32)]

        data = (Data * 2)()
        data[0].eff = data[0].perm = cfg.get("keep_caps", 0)
        if libc.capset(ctypes.byref(Hdr(0x20080522, 0)), data) != 0:  # _LINUX_CAPABILITY_VERSION_3
            raise OSError(ctypes.get_errno(), "capset failed")
    except OSError:
        if os.getuid() != 0:
            os._exit(70)  # half-dropped: refuse to run anything
        return False
    finally:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    return os.getuid() != 0 and os.geteuid() != 0


def _limits(cfg):
    import resource as R

    for res, val in ((R.RLIMIT_CPU, cfg["cpu_s"]), (R.RLIMIT_AS, cfg["memory_mb"] << 20), (R.RLIMIT_FSIZE, cfg["fsize"]),
                     (R.RLIMIT_CORE, 0), (R.RLIMIT_NPROC, 0), (R.RLIMIT_NOFILE, 64)):
        hard = R.getrlimit(res)[1]
        val = val if hard == R.RLIM_INFINITY else min(val, hard)
        try:
            R.setrlimit(res, (val, val))
        except (ValueError, OSError):
            pass


def _stub(isolated):
    """Speed bumps only (a determined answer can use ctypes); the real walls are rlimits, uid, netns, killpg."""
    import posix

    def deny(*a, **k):
        raise PermissionError("not allowed in the sandbox")

    for mod in (os, posix):
        for name in _DENY:
            if hasattr(mod, name):
                setattr(mod, name, deny)
    try:
        import _posixsubprocess

        _posixsubprocess.fork_exec = deny
    except ImportError:
        pass
    if not isolated:  # no private network namespace: refuse sockets at import time
        sys.modules["_socket"] = sys.modules["socket"] = None


def main():
    fd = int(sys.argv[1])
    req = marshal.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    cfg, calls, max_line = req["cfg"], req["calls"], req["cfg"]["max_line"]
    isolated = _confine(cfg)
    _limits(cfg)
    _stub(isolated)
    del sys.argv[1:]
    ns = {"__name__": "__colbench_answer__", "__builtins__": __builtins__}
    try:
        exec(compile(req.pop("code"), "<answer>", "exec"), ns)
    except BaseException as e:
        _emit(fd, {"fatal": _reason(e)}, max_line)
        os._exit(0)
    _emit(fd, {"ready": 1, "iso": int(isolated)}, max_line)
    for i, call in enumerate(calls):
        try:
            value = eval(compile(call, "<test>", "eval"), ns)
        except BaseException as e:
            reason = _reason(e)
            if isinstance(e, NameError) and not any(isinstance(x, type(_reason)) for x in list(ns.values())):
                reason = "no function defined"
            _emit(fd, {"i": i, "ok": 0, "e": reason}, max_line)
            continue
        try:
            line = {"i": i, "ok": 1, "v": _encode(value)}
        except BaseException as e:
            line = {"i": i, "ok": 0, "e": "unencodable result: " + _reason(e)}
        _emit(fd, line, max_line)
    os._exit(0)  # skip atexit hooks the answer may have registered


if __name__ == "__main__":
    main()
