"""Child side of :mod:`sweet.sandbox`.  Runs UNTRUSTED model-written code.

Started as ``python -S -P -B _child.py REQ_FD RES_FD`` in a fresh session and temp cwd, or forked by the fork
server (``_server``), which then calls ``serve`` with the same two pipes and the same protocol.  Protocol (the
parent's messages are trusted; length-prefixed marshal on REQ_FD):
  parent -> child  {"code", "cfg"}       the child confines itself (:mod:`_confine`), reports it, then
  child -> parent  {"iso": [layers]}     (one JSON line on RES_FD) execs the code, and says
  child -> parent  {"ready": 1}  or  {"fatal": reason}      (cfg "scope" "per_call": compiles it only; each
                                                            call then execs it anew, see ``main``)
  parent -> child  (nonce, call)         one call at a time, each with a fresh random nonce, sent only after the
  child -> parent  {"n": nonce, "ok": 1, "v": value} | {"n": nonce, "ok": 0, "e": reason}   previous result
Everything after ``exec(code)`` is assumed compromised.  The answer can find and write to RES_FD, but the nonce of
call i does not exist before the parent sends call i, and the parent takes exactly one line per call, in order,
carrying that call's nonce (anything else ends the run as "bad result").  So a forged line can at most report a
value for the call now running, which the answer could have returned anyway; expected values never enter here.
The answer's stdin/stdout/stderr are /dev/null.  Stdlib only; never import this module from the pipeline.
"""
import fcntl
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
        data = (_dump({**{k: obj[k] for k in ("n",) if k in obj}, "ok": 0, "e": "result too large"}) + "\n").encode()
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


def _stub(isolated):
    """Speed bumps only (a determined answer can use ctypes); the walls are in _confine, rlimits, killpg."""
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


def _read(fd, n):
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def _recv(fd):
    """One length-prefixed marshal message from the parent, or None at end of input."""
    head = _read(fd, 4)
    body = None if head is None else _read(fd, int.from_bytes(head, "big"))
    return None if body is None else marshal.loads(body)


def _renumber(*fds):
    """Move the inherited pipe ends to 3, 4, ...: their numbers in the parent depend on how many descriptors it
    has open, and the child's layout should not (nor what an answer that writes to fds 3..63 can reach)."""
    high = []
    for fd in fds:  # first above every target, so no dup2 below can clobber a pipe not yet moved
        high.append(fcntl.fcntl(fd, fcntl.F_DUPFD, 3 + len(fds)))
        os.close(fd)
    for target, fd in enumerate(high, start=3):
        os.dup2(fd, target, inheritable=False)
        os.close(fd)
    return tuple(range(3, 3 + len(fds)))


def main():
    req_fd, fd = _renumber(int(sys.argv[1]), int(sys.argv[2]))
    req = _recv(req_fd)
    confinement = {"__name__": "_confine"}
    exec(marshal.loads(req.pop("confine")), confinement)  # _confine.py, compiled by the parent
    layers = confinement["confine"](req["cfg"])
    confinement["limits"](req["cfg"])
    del confinement
    serve(req_fd, fd, req, layers)


def serve(req_fd, fd, req, layers):
    """Report ``layers`` (already in force), then run the answer and its calls: the part after confinement, the
    same whether this process was started for the answer (``main``) or forked by the fork server (``_server``)."""
    cfg, max_line = req["cfg"], req["cfg"]["max_line"]
    _stub("netns" in layers)
    del sys.argv[1:]
    _emit(fd, {"iso": layers}, max_line)  # before the answer runs, so the parent can trust this line
    per_call = cfg.get("scope") == "per_call"
    ns = {"__name__": "__colbench_answer__", "__builtins__": __builtins__}
    try:
        code = compile(req.pop("code"), "<answer>", "exec")
        if not per_call:
            exec(code, ns)
    except BaseException as e:
        _emit(fd, {"fatal": _reason(e)}, max_line)
        os._exit(0)
    _emit(fd, {"ready": 1}, max_line)
    while True:  # one call at a time: the parent sends call i (with a fresh nonce) only after result i-1 arrived
        msg = _recv(req_fd)
        if msg is None:
            os._exit(0)  # skip atexit hooks the answer may have registered
        nonce, call = msg
        scope, calling = ns, True
        try:
            if per_call:
                # The released evaluation's semantics (`exec(code)` then `eval(test)` inside a function, per test),
                # written out so no interpreter version changes them: the code runs anew with its top-level names
                # in a locals dict apart from its globals, so its own functions cannot see them (a helper, an
                # import, the function itself when recursive: NameError), while the test call can.
                ns, scope, calling = {"__name__": "__colbench_answer__", "__builtins__": __builtins__}, {}, False
                exec(code, ns, scope)
                calling = True
            value = eval(compile(call, "<test>", "eval"), ns, scope)
        except BaseException as e:
            reason = _reason(e)
            if calling and isinstance(e, NameError) and not any(isinstance(x, type(_reason))
                                                                for x in list(scope.values())):
                reason = "no function defined"
            _emit(fd, {"n": nonce, "ok": 0, "e": reason}, max_line)
            continue
        try:
            line = {"n": nonce, "ok": 1, "v": _encode(value)}
        except BaseException as e:
            line = {"n": nonce, "ok": 0, "e": "unencodable result: " + _reason(e)}
        _emit(fd, line, max_line)


if __name__ == "__main__":
    main()
