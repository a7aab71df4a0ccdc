"""Sandbox for model-written ColBench answers: scoring semantics and hostile answers.  Fast (< ~30 s).

Protections that this machine lacks (not root: no namespaces or uid drop; old kernel: no Landlock; not x86_64:
no seccomp) skip their tests with the reason; `sandbox.protections()` says what is in force."""

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from sweet import sandbox
from sweet.sandbox import (
    TestReport,
    Unsupported,
    evaluate_answer,
    evaluate_many,
    run_calls,
    strip_code_fences,
)

IS_ROOT = os.geteuid() == 0
REF = "def f(x):\n    return x * 2\n"
TESTS = [f"f({i})" for i in range(10)]
FAST = {"timeout_s": 0.5}


@pytest.fixture(autouse=True)
def _short_grace(monkeypatch):
    monkeypatch.setattr(sandbox, "STARTUP_GRACE_S", 2.0)


def _answer_if(cond: str, body: str) -> str:
    """f(x) is correct except when `cond` holds, where it runs `body`."""
    return f"import os, sys\ndef f(x):\n    if {cond}:\n{body}\n    return x * 2\n"


def test_correct_answer_full_marks_and_fences():
    r = evaluate_answer(f"Sure:\n```python\n{REF}```\nDone.", REF, TESTS)
    assert (r.passed, r.total, r.error, r.reward, r.success) == (10, 10, None, 1.0, True)
    assert r.errors == [None] * 10


def test_partial_and_wrong():
    r = evaluate_answer("def f(x):\n    return x * 2 if x < 4 else x\n", REF, TESTS)
    assert r.passed == 4 and r.errors[5] == "wrong answer" and r.errors[0] is None
    assert r.reward == 0.4 and not r.success
    assert TestReport(0, 0, [], None).reward == 0.0 and not TestReport(0, 0, [], None).success


def test_syntax_error_and_empty():
    r = evaluate_answer("def f(x):\n    return (x\n", REF, TESTS)
    assert r.passed == 0 and r.error.startswith("SyntaxError") and r.errors[0].startswith("SyntaxError")
    assert evaluate_answer("```python\n```", REF, TESTS).error == "empty answer"


def test_exception_in_one_test_and_no_function():
    r = evaluate_answer(_answer_if("x == 3", "        raise KeyError('boom')"), REF, TESTS)
    assert r.passed == 9 and r.errors[3] == "KeyError: 'boom'"
    r = evaluate_answer("x = 1\n", REF, TESTS)
    assert r.passed == 0 and r.errors[0] == "no function defined"
    r = evaluate_answer("def g(x):\n    return x\n", REF, TESTS)
    assert r.errors[0].startswith("NameError")


def test_infinite_loop_times_out_only_that_test():
    t = time.monotonic()
    r = evaluate_answer(_answer_if("x == 3", "        while True: pass"), REF, TESTS, **FAST)
    assert r.passed == 9 and r.errors[3] == "timeout" and r.error is None
    r = evaluate_answer(_answer_if("x in (1, 7)", "        import time; time.sleep(60)"), REF, TESTS, **FAST)
    assert r.passed == 8 and r.errors[1] == r.errors[7] == "timeout"
    assert time.monotonic() - t < 10


def test_loop_at_import_is_overall_timeout():
    r = evaluate_answer("while True:\n    pass\n" + REF, REF, TESTS, **FAST)
    assert r.passed == 0 and r.error == "timeout"


def test_memory_bomb():
    r = evaluate_answer("x = bytearray(8 * 2**30)\n" + REF, REF, TESTS)
    assert r.passed == 0 and r.error == "MemoryError"
    body = "        l = []\n        while True: l.append(' ' * 10**7)"
    r = evaluate_answer(_answer_if("x == 2", body), REF, TESTS, timeout_s=10, memory_mb=256)
    assert r.passed == 9 and r.errors[2] == "MemoryError"


def test_fork_is_blocked_and_fork_bomb_is_harmless():
    probe = ("import os, ctypes\ndef probe():\n    pid = ctypes.CDLL(None).fork()\n    if pid == 0:\n"
             "        os._exit(0)\n    return 'blocked' if pid < 0 else 'forked'\n"
             "def via_os():\n    try:\n        os.fork()\n    except OSError:\n        return 'blocked'\n")
    res = run_calls(probe, ["probe()", "via_os()"])
    assert res == [(True, "blocked"), (True, "blocked")]  # the rlimit itself, not just the os.fork stub
    # only now is it safe to let a real fork bomb loose
    bomb = ("import os, ctypes\nlibc = ctypes.CDLL(None)\ndef f(x):\n    while True:\n        libc.fork()\n"
            "        try:\n            os.fork()\n        except OSError:\n            pass\n")
    assert run_calls(bomb, ["f(1)", "2 + 2"], timeout_s=0.5) == [(False, "timeout"), (True, 4)]
    if IS_ROOT:
        leftovers = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    uid = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if uid >= 200_000:
                leftovers.append(pid)
        assert leftovers == []


def _landlock_abi(layers):
    return max((int(x[len("landlock"):]) for x in layers if x.startswith("landlock")), default=0)


LAYERS = sandbox.protections()
LANDLOCK_ABI = _landlock_abi(LAYERS)
HAS_LANDLOCK = LANDLOCK_ABI > 0
HAS_MOUNTNS = "mountns" in LAYERS
PKG = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))  # sweet/
PROJECT = os.path.dirname(PKG)
TASKS_FILE = os.path.join(PKG, "colbench", "data", "backend_tasks.jsonl")  # references and hidden tests
FS_CONFIGS = [  # (mount namespace, landlock): everything on, then each fallback on its own
    pytest.param((True, True), id="all", marks=pytest.mark.skipif(
        not (HAS_MOUNTNS or HAS_LANDLOCK), reason="no filesystem confinement here (not root and no Landlock)")),
    pytest.param((False, True), id="landlock-only", marks=pytest.mark.skipif(
        not HAS_LANDLOCK, reason="Landlock is not available on this kernel")),
    pytest.param((True, False), id="mountns-only", marks=pytest.mark.skipif(
        not HAS_MOUNTNS, reason="the private mount namespace needs root")),
]
STDLIB_ANSWER = ("import math, re, collections, itertools, functools, datetime, json, string, heapq, bisect\n"
                 "import statistics, fractions, decimal, random, typing, dataclasses, copy, operator, tempfile\n"
                 "def f(x):\n    d = json.loads(json.dumps({'v': x}))\n"
                 "    return int(statistics.mean([d['v'], d['v']]) * 2 + math.floor(0.5) + len(re.findall('z', '')))\n")


@pytest.fixture
def fs_layers(request, monkeypatch):
    mountns, landlock = request.param
    monkeypatch.setattr(sandbox, "USE_MOUNTNS", mountns)
    monkeypatch.setattr(sandbox, "USE_LANDLOCK", landlock)
    layers = sandbox.protections()
    assert ("mountns" in layers) == mountns and any(x.startswith("landlock") for x in layers) == landlock
    return layers


@pytest.fixture
def planted():
    """A world-writable dir outside the sandbox (so only the confinement, not file modes, stops the answer) holding
    a world-writable victim file and a world-readable secret; plus where an escape would land."""
    d = tempfile.mkdtemp(prefix="sbx-planted-", dir="/tmp")
    os.chmod(d, 0o777)
    victim, secret = os.path.join(d, "victim.txt"), os.path.join(d, "reference.py")
    with open(victim, "w") as fh:
        fh.write("keep me")
    with open(secret, "w") as fh:
        fh.write("# SECRET_REFERENCE_5d1e\ndef f(x):\n    return x * 2\n")
    os.chmod(victim, 0o666)
    os.chmod(secret, 0o644)
    tag = f"sbx-escape-{os.getpid()}-{time.monotonic_ns()}"
    escapes = [os.path.join(p, tag) for p in ("/tmp", "/dev/shm", "/var/tmp", PROJECT, PKG, d) if os.path.isdir(p)]
    st = os.stat(victim)
    yield d, victim, secret, escapes
    leftovers = [p for p in escapes if os.path.lexists(p)]
    for p in leftovers:
        os.remove(p)
    with open(victim) as fh:
        assert fh.read() == "keep me"
    assert (os.stat(victim).st_mode, os.stat(victim).st_mtime_ns) == (st.st_mode, st.st_mtime_ns)
    assert sorted(os.listdir(d)) == ["reference.py", "victim.txt"] and leftovers == []
    shutil.rmtree(d)


@pytest.mark.parametrize("fs_layers", FS_CONFIGS, indirect=True)
def test_cannot_change_files_outside_its_dir(fs_layers, planted):
    d, victim, _, escapes = planted
    code = f"import os\nV = {victim!r}\nD = {d!r}\n"
    calls = ["os.remove(V)", "open(V, 'a').write('x')", "open(V, 'w')", "os.rename(V, V + '.moved')",
             "os.chmod(V, 0o600)", "os.utime(V, (0, 0))", "os.mkdir(D + '/newdir')",
             "os.symlink('/etc/passwd', D + '/link')", "os.truncate(V, 0)",
             "os.link(V, 'hard') or open('hard', 'a').write('x')", "os.rename(V, 'stolen')"]
    calls += [f"open({p!r}, 'w').write('x')" for p in escapes]
    res = run_calls(code, calls)
    assert [ok for ok, _ in res] == [False] * len(calls), list(zip(calls, res))
    assert all(("Error" in why) for _, why in res), res  # PermissionError, OSError (read-only fs), FileNotFoundError
    # the answer's own dir is still writable, so normal answers work
    assert run_calls("import os\n", ["open('mine.txt', 'w').write('ok')", "open('mine.txt').read()"]) == \
        [(True, 2), (True, "ok")]


@pytest.mark.parametrize("fs_layers", FS_CONFIGS, indirect=True)
def test_cannot_read_planted_reference_tests_or_parent_env(fs_layers, planted):
    code = "import os, glob\ndef rd(p):\n    with open(p, errors='replace') as fh:\n        return fh.read()\n"
    _, _, secret, _ = planted
    targets = [secret, TASKS_FILE, os.path.join(PKG, "colbench", "sandbox.py")]
    artifacts = glob.glob(os.path.join(PROJECT, "artifacts", "**", "*.parquet"), recursive=True)[:1]
    calls = [f"rd({t!r})" for t in targets] + [
        "rd(f'/proc/{os.getppid()}/environ')", "rd(f'/proc/{os.getppid()}/cmdline')",
        "[rd(p) for p in glob.glob('/tmp/sbx-planted-*/*')]",
        "[p for p in glob.glob('/tmp/sweet-sbx-*') if p != os.getcwd()]",
        f"os.listdir({os.path.dirname(secret)!r})", f"os.listdir({PROJECT!r})"]
    calls += [f"open({a!r}, 'rb').read(4)" for a in artifacts]  # e.g. stage outputs with references in them
    res = run_calls(code, calls)
    assert all(not ok for ok, _ in res[:5]), res  # the files exist and are world-readable; the reads fail
    text = repr(res)
    with open(f"/proc/{os.getpid()}/environ", "rb") as fh:  # what there was to steal (API keys live there)
        env = [e.decode(errors="replace") for e in fh.read().split(b"\0") if len(e) > 8]
    assert env and not any(e in text for e in env)
    assert "SECRET_REFERENCE_5d1e" not in text and "ground_truth" not in text
    assert res[5] in ((True, []), (False, res[5][1])) and res[6] in ((True, []), (False, res[6][1]))  # others' dirs
    assert not res[7][0] and not res[8][0] and not any(ok for ok, _ in res[9:])


@pytest.mark.parametrize("fs_layers", FS_CONFIGS, indirect=True)
def test_normal_answers_still_pass_under_confinement(fs_layers):
    r = evaluate_answer(STDLIB_ANSWER, REF, TESTS)
    assert r.success, r.errors
    assert run_calls("import zoneinfo, datetime\n", ["str(zoneinfo.ZoneInfo('Europe/Paris'))"]) == \
        [(True, "Europe/Paris")]


@pytest.mark.skipif(not HAS_MOUNTNS, reason="the private mount namespace needs root")
def test_a_refused_private_root_falls_back_to_the_other_layers(monkeypatch):
    monkeypatch.setattr(sandbox, "WORK_MB", "refused")  # the kernel rejects the tmpfs: the half-built root goes
    layers = sandbox.protections()
    assert "mountns" not in layers and "uid" in layers and "netns" in layers
    assert evaluate_answer(STDLIB_ANSWER, REF, TESTS).success
    [(ok, _)] = run_calls("", [f"open({TASKS_FILE!r}).read()"])
    assert not ok or not HAS_LANDLOCK


@pytest.mark.skipif(not HAS_MOUNTNS, reason="the size-capped private cwd needs the mount namespace (root)")
def test_cannot_fill_the_disk():
    code = "def fill():\n    i = 0\n    while True:\n        open(f'f{i}', 'wb').write(b'x' * 2**20)\n        i += 1\n"
    [(ok, why)] = run_calls(code, ["fill()"], timeout_s=5)
    assert not ok and "No space left" in why


@pytest.mark.skipif(not IS_ROOT, reason="dropping to a sandbox uid needs root")
def test_runs_as_unprivileged_uid_without_capabilities():
    code = ("import os\ndef caps():\n    with open('/proc/self/status') as fh:\n"
            "        return [l.split()[1] for l in fh if l.startswith('CapEff')][0]\n")
    res = run_calls(code, ["os.getuid() != 0 and os.geteuid() != 0", "os.chmod(__import__('sys').executable, 0o777)"])
    assert res[0] == (True, True) and not res[1][0]
    assert "uid" in LAYERS and "netns" in LAYERS

def test_own_temp_dir_is_cwd_and_deleted():
    code = "import os\nos.makedirs('d/e')\nopen('d/e/f', 'w').write('x' * 100)\nos.chmod('d/e', 0)\nos.chmod('d', 0)\n"
    [(ok, cwd)] = run_calls(code, ["os.getcwd()"])
    assert ok and os.path.basename(cwd).startswith("sweet-sbx-") and not os.path.exists(cwd)
    [(ok, reason)] = run_calls("def f():\n    open('big', 'wb').write(b'x' * 5 * 2**20)\n", ["f()"])
    assert not ok and ("File too large" in reason or "OSError" in reason)


def test_socket_cannot_reach_anything():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.3)
    port = srv.getsockname()[1]
    code = f"import socket\ndef f():\n    s = socket.socket()\n    s.connect(('127.0.0.1', {port}))\n    return 'connected'\n"
    try:
        [(ok, reason)] = run_calls(code, ["f()"])
        assert not ok and reason != "connected"
        with pytest.raises(socket.timeout):
            srv.accept()
    finally:
        srv.close()


def test_answer_cannot_find_the_reference_or_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    marker = "REFERENCE_MARKER_8c1f2"
    reference = f"# {marker}\ndef f():\n    return False\n"
    answer = (
        "import os, sys, gc\n"
        "def f():\n"
        f"    m = {marker[:-1]!r} + {marker[-1]!r}\n"
        "    if 'OPENAI_API_KEY' in os.environ or any(m in a for a in sys.argv):\n"
        "        return True\n"
        "    if any(isinstance(o, str) and m in o for o in gc.get_objects()):\n"
        "        return True\n"
        "    for root, _, files in os.walk('.'):\n"
        "        for n in files:\n"
        "            if m in open(os.path.join(root, n), errors='replace').read():\n"
        "                return True\n"
        "    for p in (f'/proc/{os.getppid()}/environ', f'/proc/{os.getppid()}/cmdline'):\n"
        "        try:\n"
        "            if m in open(p, errors='replace').read():\n"
        "                return True\n"
        "        except OSError:\n"
        "            pass\n"
        "    return False\n"
    )
    r = evaluate_answer(answer, reference, ["f()"])
    assert r.success, r.errors
    [(ok, env)] = run_calls("import os\n", ["dict(os.environ)"])
    assert ok and "OPENAI_API_KEY" not in env and env.get("PYTHONHASHSEED") == "0"


def test_overriding_eq_does_not_pass():
    ref = "def f():\n    return 3\n"
    r = evaluate_answer("class A:\n    def __eq__(s, o): return True\n    __hash__ = None\ndef f():\n    return A()\n",
                        ref, ["f()"])
    assert not r.success and r.errors == ["wrong answer"]
    liar = ("class I(int):\n    def __eq__(s, o): return True\n    def __repr__(s): return '3'\n"
            "    def __format__(s, spec): return '3'\n    __hash__ = int.__hash__\ndef f():\n    return I(5)\n")
    assert not evaluate_answer(liar, ref, ["f()"]).success
    # an unsupported value equals nothing, not even the reference's own unsupported value
    obj = "class A:\n    pass\ndef f():\n    return A()\n"
    assert evaluate_answer(obj, obj, ["f()"]).errors == ["wrong answer"]
    assert Unsupported("A") != Unsupported("A") and not (Unsupported("A") == Unsupported("A"))


# What a forger can do: find the result pipe (any fd, or /proc/self/fd when /proc exists) and write well-formed
# lines claiming the *expected* values (2 * x here) for every call, in every key format it can guess.
FORGER = '''
import os, sys, json
READY = '{"ready":1,"iso":["netns","mountns","landlock7","uid"]}\\n'
def _lines(nonces=(), ready=True):
    out = READY if ready else ''
    for x in range(10):
        v = ["i", format(2 * x, "x")]
        for key in [{"n": n} for n in nonces] + [{"i": x}, {"n": format(x, "x")}, {"n": str(x)}, {}]:
            out += json.dumps({**key, "ok": 1, "v": v}) + "\\n"
    return out.encode()
def _spray(data):
    for fd in range(3, 64):
        try:
            os.write(fd, data)
        except OSError:
            pass
    try:
        for n in os.listdir('/proc/self/fd'):
            try:
                fd = os.open('/proc/self/fd/' + n, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, data)
                os.close(fd)
            except OSError:
                pass
    except OSError:
        pass
'''


def test_forged_output_is_ignored():
    fake = '{"i":0,"ok":1,"v":["i","0"]}\n'
    answer = (f"import os, sys\nprint('{{\"ready\":1,\"iso\":1}}')\n"
              f"def f(x):\n    print({fake!r}); sys.stderr.write({fake!r}); os.write(1, {fake!r}.encode())\n"
              "    return -1\n")
    r = evaluate_answer(answer, REF, TESTS)
    assert r.passed == 0 and set(r.errors) == {"wrong answer"}
    junk = "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'garbage\\n')\n    except OSError:\n        pass\n"
    r = evaluate_answer(junk + REF, REF, TESTS)
    assert r.passed == 0 and r.error == "protocol error"


def test_child_fd_layout_does_not_depend_on_the_parents_open_fds():
    # A parent holding many descriptors (a long pytest run, a busy Prefect worker) gives the pipes high numbers; the
    # child moves them to 3 and 4, so an answer writing to fds 3..63 disturbs the protocol whatever the parent held.
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(100)]
    try:
        junk = "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'garbage\\n')\n    except OSError:\n        pass\n"
        r = evaluate_answer(junk + REF, REF, TESTS)
        assert r.passed == 0 and r.error == "protocol error"
        assert evaluate_answer(REF, REF, TESTS).passed == 10
    finally:
        for fd in held:
            os.close(fd)


def test_forged_results_at_import_time_fail():
    # before any call exists: lines for every index, with the values the reference will produce; f is wrong
    r = evaluate_answer(FORGER + "_spray(_lines())\ndef f(x):\n    return -1\n", REF, TESTS)
    assert r.passed == 0 and set(r.errors) == {"bad result"}, r.errors
    # the exact lines an index-keyed protocol would take (this got 10/10 before results carried call nonces)
    by_index = ("import os\ndata = b'{\"ready\":1}\\n' + b''.join(b'{\"i\":%d,\"ok\":1,\"v\":[\"i\",\"%x\"]}\\n' "
                "% (x, 2 * x) for x in range(10))\nfor fd in range(3, 64):\n    try:\n        os.write(fd, data)\n"
                "    except OSError:\n        pass\ndef f(x):\n    return -1\n")
    r = evaluate_answer(by_index, REF, TESTS)
    assert r.passed == 0 and set(r.errors) == {"bad result"}, r.errors
    # the same after also reading the child's own state (its frames) and the pending request pipe: it learns the
    # nonce of call 0 only once call 0 is sent, i.e. when it could just as well have computed that value itself
    steal = (FORGER + "import marshal\n"
             "st = sys._getframe(1).f_locals  # main() of the child\n"
             "_spray(READY.encode())\n"  # a fake 'ready' makes the parent send call 0 while we are still importing
             "head = os.read(st['req_fd'], 4)\n"
             "nonce, call = marshal.loads(os.read(st['req_fd'], int.from_bytes(head, 'big')))\n"
             "_spray(_lines([nonce], ready=False))\n"
             "def f(x):\n    return -1\n")
    r = evaluate_answer(steal, REF, TESTS)
    assert r.passed == 1 and r.errors[1:] == ["bad result"] * 9, r.errors


def test_forged_results_during_a_call_fail():
    # inside call 0 the answer knows that call's nonce; it claims the expected value for it and for all later ones
    answer = (FORGER + "def f(x):\n"
              "    fr = sys._getframe(1)\n"
              "    while 'nonce' not in fr.f_locals:\n"
              "        fr = fr.f_back\n"
              "    nonce = fr.f_locals['nonce']\n"
              "    _spray(_lines([nonce], ready=False))\n"
              "    return -1\n")
    r = evaluate_answer(answer, REF, TESTS)  # call 0: its line for the nonce of call 0 claims 2 * 0, a pass it
    assert r.passed == 1 and r.errors[1:] == ["bad result"] * 9, r.errors  # could have had by returning 0
    # an atexit hook is never run (the child leaves with os._exit), so it cannot forge the last word either
    hook = (FORGER + "import atexit\natexit.register(lambda: _spray(_lines()))\n"
            "atexit.register(lambda: [0 for _ in iter(int, 1)])\n")
    assert evaluate_answer(hook + "def f(x):\n    return -1\n", REF, TESTS).passed == 0
    r = evaluate_answer(hook + REF, REF, TESTS, **FAST)
    assert r.success, r.errors


def test_exit_at_import_and_in_call():
    for code, err in (("import sys\nsys.exit()\n", "SystemExit"), ("import sys\nsys.exit(0)\n", "SystemExit: 0"),
                      ("import os\nos._exit(0)\n", "exited (code 0)"), ("import os\nos._exit(3)\n", "exited (code 3)")):
        r = evaluate_answer(code + REF, REF, TESTS)
        assert r.passed == 0 and r.error == err and r.errors == [err] * 10
    r = evaluate_answer(_answer_if("x == 4", "        os._exit(0)"), REF, TESTS)
    assert r.passed == 9 and r.errors[4] == "exited (code 0)"
    r = evaluate_answer(_answer_if("x == 5", "        sys.exit(1)"), REF, TESTS)
    assert r.passed == 9 and r.errors[5] == "SystemExit: 1"


def test_segfault():
    r = evaluate_answer(_answer_if("x == 2", "        import ctypes; ctypes.string_at(0)"), REF, TESTS)
    assert r.passed == 9 and r.errors[2] == "crashed (signal 11)"
    r = evaluate_answer("import ctypes\nctypes.string_at(0)\n" + REF, REF, TESTS)
    assert r.passed == 0 and r.error == "crashed (signal 11)"


def test_huge_output():
    body = "        while True:\n            sys.stdout.write('x' * 10**6); os.write(2, b'y' * 10**5)"
    r = evaluate_answer(_answer_if("x == 0", body), REF, TESTS, **FAST)
    assert r.passed == 9 and r.errors[0] == "timeout"
    r = evaluate_answer(_answer_if("x == 1", "        print('x' * 10**9)"), REF, TESTS)  # beyond the address space
    assert r.passed == 9 and r.errors[1] == "MemoryError"
    big = "def f():\n    return 'x' * (2 * 2**20)\n"
    assert run_calls(big, ["f()", "1"]) == [(False, "result too large"), (True, 1)]


def test_value_semantics():
    def same(a, b):
        return evaluate_answer(f"def f():\n    return {a}\n", f"def f():\n    return {b}\n", ["f()"]).success

    assert not same("[1, 2]", "(1, 2)")
    assert same("{'a': 1, 'b': [2, (3,)]}", "{'b': [2, (3,)], 'a': 1}")
    assert same("2.0", "2") and same("True", "1") and same("{1, 2}", "{2, 1}") and same("None", "None")
    assert not same("float('nan')", "float('nan')") and not same("0.1 + 0.2", "0.3")
    assert same("__import__('collections').Counter('aab')", "{'a': 2, 'b': 1}")
    assert same("__import__('collections').namedtuple('P', 'x y')(1, 2)", "(1, 2)")
    assert same("10 ** 5000", "10 ** 5000") and not same("10 ** 5000", "10 ** 5000 + 1")
    assert same("b'ab'", "bytearray(b'ab')") and same("1j", "complex(0, 1)") and not same("'1'", "1")
    assert same("frozenset({1})", "{1}") and not same("[{'a': (1,)}]", "[{'a': [1]}]")
    # str/set ordering depends on the hash seed: it must be the same in every child
    assert same("list({'apple', 'kiwi', 'fig', 'plum', 'pear'})", "list({'apple', 'kiwi', 'fig', 'plum', 'pear'})")
    assert run_calls("", ["hash('abc')"]) == run_calls("", ["hash('abc')"])


def test_strict_decoder_rejects_hostile_values():
    for bad in (5, "x", ["i", "0x10"], ["i", 7], ["q", "1"], ["d", [["l", []]]], ["S", [["l", []]]],
                ["l", "abc"], ["i"], ["f", "nope"]):
        with pytest.raises((ValueError, TypeError)):
            sandbox._decode(bad)
    assert sandbox._decode(["d", [[["t", [["i", "1"], ["s", "a"]]], ["S", [["i", "-ff"]]]]]]) == {(1, "a"): {-255}}


def test_strip_code_fences():
    assert strip_code_fences("def f(): pass") == "def f(): pass"
    assert strip_code_fences("text\n```python\ndef f():\n    return 1\n```\nmore") == "def f():\n    return 1\n"
    assert strip_code_fences("```\nx = 1\n```") == "x = 1\n"
    assert strip_code_fences("```bash\nls\n```\n```py\ny = 2\n```") == "y = 2\n"
    assert strip_code_fences("```python\nz = 3\n") == "z = 3\n"  # unterminated fence


def test_evaluate_many_parallel_order_and_reference_cache(monkeypatch):
    calls = []
    real_run = sandbox._run
    monkeypatch.setattr(sandbox, "_run", lambda code, *a, **k: calls.append(code) or real_run(code, *a, **k))
    ref = "def f(x):\n    return x + 1  # cache-test-7f3\n"
    tests = ["f(1)", "f(2)"]
    items = [(f"import time\ndef f(x):\n    time.sleep({0.6 if i % 2 else 0.0})\n    return x + {1 if i < 4 else 2}\n",
              ref, tests) for i in range(6)]
    t = time.monotonic()
    reports = evaluate_many(items, workers=6)
    elapsed = time.monotonic() - t
    assert [r.passed for r in reports] == [2, 2, 2, 2, 0, 0]
    assert calls.count(ref) == 1  # the reference ran once for all six answers
    assert elapsed < 3 * 2 * 0.6  # three slow answers (two sleeping calls each) did not run one after another
    assert evaluate_many([]) == []


def test_evaluate_many_looping_answers_do_not_stall_the_batch(monkeypatch):
    pools, real_pool = [], sandbox.ThreadPoolExecutor
    monkeypatch.setattr(sandbox, "ThreadPoolExecutor", lambda max_workers: pools.append(max_workers) or real_pool(
        max_workers=max_workers))
    assert [r.passed for r in evaluate_many([(REF, REF, TESTS[:2])] * 64)] == [2] * 64
    assert pools == [min(64, os.cpu_count())]  # by default one child per core
    good = [REF, "def f(x):\n    return x + x\n", "def f(x):\n    return 2 * x\n"]
    loops = ["while True:\n    pass\n", "def f(x):\n    while True:\n        pass\n",
             "import time\ndef f(x):\n    time.sleep(60)\n"]
    items = [(a, REF, TESTS[:3]) for pair in zip(good, loops) for a in pair]  # good, loop, good, loop, ...
    t = time.monotonic()
    reports = evaluate_many(items, **FAST)
    assert [r.passed for r in reports] == [3, 0, 3, 0, 3, 0]
    assert reports[1].error == "timeout" and reports[3].errors == reports[5].errors == ["timeout"] * 3
    assert time.monotonic() - t < 60  # generous: each looping call costs only its own 0.5 s budget


@pytest.mark.skipif(not IS_ROOT and LANDLOCK_ABI < 6,
                    reason="signal isolation needs root (uid drop) or Landlock ABI >= 6 (signal scoping)")
def test_cannot_signal_the_parent_or_other_processes():
    victim = subprocess.Popen(["sleep", "60"])  # a stand-in for the pipeline: the only process we let it aim at
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            pid_max = min(int(fh.read()), 1 << 20)
        code = ("import ctypes, os, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "def hit(pid, sig):\n    return libc.kill(pid, sig)\n"
                f"def reachable():\n    return [p for p in range(1, {pid_max})"
                " if p != os.getpid() and hit(p, 0) == 0]\n")
        calls = [f"hit({victim.pid}, 9)", f"hit(-{victim.pid}, 9)", "hit(os.getppid(), 0)", "hit(1, 0)",
                 "os.kill(os.getppid(), 9)", "reachable()"]
        res = run_calls(code, calls, timeout_s=10)
        assert res[:4] == [(True, -1)] * 4 and not res[4][0] and res[5] == (True, []), res
        time.sleep(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_signal_tricks_and_closed_fds_only_cost_that_test():
    trick = ("        import signal\n        for s in range(1, 65):\n            try:\n"
             "                signal.signal(s, signal.SIG_IGN)\n            except (OSError, ValueError):\n"
             "                pass\n        signal.pthread_sigmask(signal.SIG_BLOCK, range(1, 65))\n"
             "        while True:\n            pass")
    r = evaluate_answer(_answer_if("x == 3", trick), REF, TESTS, **FAST)
    assert r.passed == 9 and r.errors[3] == "timeout"
    close = ("        for fd in range(64):\n            try:\n                os.close(fd)\n"
             "            except OSError:\n                pass")
    r = evaluate_answer(_answer_if("x == 6", close), REF, TESTS, **FAST)
    assert r.passed == 9 and r.errors[6] is not None
    r = evaluate_answer(_answer_if("x == 6", close + "\n        while True:\n            pass"), REF, TESTS, **FAST)
    assert r.passed == 9 and r.errors[6] is not None
    redirect = ("import os\nfd = os.open(os.devnull, os.O_WRONLY)\nfor t in range(3, 64):\n    if t != fd:\n"
                "        try:\n            os.dup2(fd, t)\n        except OSError:\n            pass\n")
    r = evaluate_answer(redirect + REF, REF, TESTS, **FAST)  # cut its own line to us: nothing can pass
    assert r.passed == 0 and r.error is not None


def test_recursion_threads_and_huge_ints():
    deep = "import sys\nsys.setrecursionlimit(10 ** 6)\ndef r(n):\n    return 0 if n == 0 else 1 + r(n - 1)\n"
    res = run_calls(deep, ["r(10)", "r(10 ** 6)", "r(5)"])
    assert res[0] == (True, 10) and not res[1][0] and res[2] == (True, 5)
    nested = "def n():\n    x = []\n    for _ in range(10 ** 6):\n        x = [x]\n    return x\n"
    assert run_calls(nested, ["repr(n())[:3]", "n()", "1"])[1:] == [(False, "unencodable result: RecursionError: "
                                                                     "result nested too deeply"), (True, 1)]
    threads = "import threading\ndef t():\n    th = threading.Thread(target=print)\n    th.start()\n    th.join()\n"
    [(ok, why)] = run_calls(threads, ["t()"])
    assert not ok and "thread" in why  # NPROC=0: no thread can outlive or race the reporting loop
    big = "import sys\ndef s():\n    sys.set_int_max_str_digits(0)\n    return len(str(10 ** (10 ** 7)))\n"
    res = run_calls(big, ["len(str(10 ** 100000))", "s()", "1 << 2 ** 23", "3"], timeout_s=0.5)
    assert [ok for ok, _ in res] == [False, False, False, True] and res[1][1] == "timeout"
    assert res[0][1].startswith("ValueError: Exceeds the limit") and res[2][1] == "result too large"
    huge = "def f():\n    return 7 ** 300000\n"
    assert evaluate_answer(huge, huge, ["f()"]).success
    assert not evaluate_answer(huge, "def f():\n    return 7 ** 300000 + 1\n", ["f()"]).success


def test_ctypes_memory_corruption_stays_in_its_child():
    corrupt = ("import ctypes\nctypes.c_ssize_t.from_address(id(2) + 24).value = 5\n"  # the small int 2 is now 5
               "ctypes.memset(id(len) + 8, 0, 8)\n" + REF)
    good = "def f(x):\n    return x * 2\n"
    reports = evaluate_many([(corrupt, REF, TESTS), (good, REF, TESTS), (corrupt, REF, TESTS)])
    assert reports[1].success and not reports[0].success and reports[0].total == 10
    assert evaluate_answer(good, REF, TESTS).success  # the reference's cached values were not touched


def test_tampering_with_builtins_and_modules_cannot_fake_a_pass():
    tamper = ("import builtins, sys, os, _json\n"
              "builtins.isinstance = lambda *a: False\nbuiltins.type = lambda *a: int\n"
              "builtins.str = lambda *a: '\"passed\"'\n"
              "_json.encode_basestring_ascii = lambda s: '\"passed\"'\n"
              "sys.modules['json'] = sys.modules['marshal'] = sys.modules['builtins'] = None\n"
              "def f(x):\n    return -1\n")
    r = evaluate_answer(tamper, REF, TESTS, **FAST)
    assert r.passed == 0 and r.total == 10
    silence = "import os\nos.write = lambda fd, data: len(data)\ndef f(x):\n    return x * 2\n"
    r = evaluate_answer(silence, REF, TESTS, **FAST)
    assert r.passed == 0 and r.error == "timeout"
    assert evaluate_answer(REF, REF, TESTS).success


def test_parent_refuses_hash_collision_values():
    # plain ints sharing one hash: cheap for the child (its int subclass hashes apart), quadratic for the parent
    code = ("class I(int):\n    def __hash__(self):\n        return id(self)\n"
            "def f():\n    return {I(((1 << 61) - 1) * k) for k in range(1, 25000)}\n"
            "def g():\n    return {I(((1 << 61) - 1) * k): 0 for k in range(1, 25000)}\n")
    t = time.monotonic()
    assert run_calls(code, ["f()", "1"]) == [(False, "bad result"), (False, "bad result")]
    assert run_calls(code, ["g()"]) == [(False, "bad result")]
    assert run_calls("", ["{-1, -2, 1, 2}", "{(1, 2): 3}"]) == [(True, {-1, -2, 1, 2}), (True, {(1, 2): 3})]
    assert time.monotonic() - t < 20  # unguarded, decoding one such set takes ~4 s of parent CPU under the GIL


@pytest.mark.skipif("netns" not in LAYERS, reason="the private network namespace needs root")
def test_no_udp_or_abstract_unix_sockets():
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.3)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(b"\0sweet-sbx-test-%d" % os.getpid())
    unix.listen(1)
    unix.settimeout(0.3)
    code = ("import socket\ndef u(port):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "    return s.sendto(b'hello', ('127.0.0.1', port))\n"
            f"def x():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect(b'\\0sweet-sbx-test-{os.getpid()}')\n"
            "    return 'connected'\n")
    try:
        res = run_calls(code, [f"u({udp.getsockname()[1]})", "x()"])
        assert not res[0][0] and not res[1][0], res
        with pytest.raises(socket.timeout):
            udp.recvfrom(10)
        with pytest.raises(socket.timeout):
            unix.accept()
    finally:
        udp.close()
        unix.close()


@pytest.mark.skipif("seccomp" not in LAYERS, reason="the seccomp filter is x86_64 only")
def test_kernel_surface_is_closed():
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            "def sc(*a):\n    return libc.syscall(*a), ctypes.get_errno()\n"
            "def ex():\n    argv = (ctypes.c_char_p * 2)(b'/usr/bin/true', None)\n"
            "    return libc.execv(b'/usr/bin/true', argv), ctypes.get_errno()\n")
    calls = ["sc(272, 0x10000000)",  # unshare(CLONE_NEWUSER): would make it root of a new user namespace
             "sc(161, b'/usr')", "sc(101, 16, os.getppid(), 0, 0)",  # chroot, ptrace(PTRACE_ATTACH, parent)
             "sc(425, 8, ctypes.create_string_buffer(120))", "sc(321, 0, 0, 0)",  # io_uring_setup, bpf
             "sc(56, 17, 0, 0, 0, 0)", "ex()"]  # clone(SIGCHLD) as fork, execve
    res = run_calls(code, calls)
    assert res == [(True, (-1, 1))] * len(calls), res  # EPERM each time; the child is still the one answering


def _nobody_python():
    """A world-usable Python >= 3.11 (-P) to run the pipeline side as an unprivileged user, or None."""
    from sweet.sandbox._proc import _world_accessible

    if not IS_ROOT or not _world_accessible(os.path.join(PKG, "colbench", "sandbox.py")):
        return None
    for exe in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if _world_accessible(exe) and subprocess.run([exe, "-c", "import sys; assert sys.version_info >= (3, 11)"],
                                                     capture_output=True).returncode == 0:
            return exe
    return None


NOBODY_DRIVER = """
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from sweet import sandbox
victim = subprocess.Popen(["sleep", "30"])  # same uid as this 'pipeline' process
secret = os.path.join(sys.argv[2], "secret.txt")
with open(secret, "w") as fh:
    fh.write("SECRET")
code = "import os, ctypes\\nlibc = ctypes.CDLL(None, use_errno=True)\\n"
calls = [f"open({secret!r}).read()", f"os.remove({secret!r})", f"open({sys.argv[2]!r} + '/new', 'w').write('x')",
         f"open('/proc/{os.getpid()}/environ').read()", f"libc.kill({victim.pid}, 9)", "open('mine', 'w').write('ok')"]
res = sandbox.run_calls(code, calls)
time.sleep(0.2)
alive = victim.poll() is None
victim.kill()
print(json.dumps({"layers": sandbox.protections(), "res": [[ok, repr(v)] for ok, v in res], "alive": alive,
                  "normal": sandbox.evaluate_answer("import math, json\\ndef f(x):\\n    return x * 2\\n",
                                                    "def f(x):\\n    return 2 * x\\n", ["f(3)", "f(4)"]).passed}))
"""


@pytest.mark.skipif(_nobody_python() is None, reason="needs root to become 'nobody' and a world-usable Python >= 3.11")
def test_not_root_fallback_as_nobody():
    d = tempfile.mkdtemp(prefix="sbx-nobody-", dir="/tmp")
    os.chmod(d, 0o777)
    try:
        out = subprocess.run([_nobody_python(), "-c", NOBODY_DRIVER, PROJECT, d], user=65534, group=65534, cwd=d,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        if not _landlock_abi(got["layers"]):
            pytest.skip("no Landlock here: as a plain user the sandbox cannot confine files (see the docstring)")
        assert [ok for ok, _ in got["res"][:4]] == [False] * 4, got
        assert got["normal"] == 2 and got["res"][5] == [True, "2"] and "SECRET" not in out.stdout
        assert sorted(os.listdir(d)) == ["secret.txt"]
        if _landlock_abi(got["layers"]) >= 6:
            assert got["alive"] and got["res"][4] == [True, "-1"]  # signal scoping: our own uid, still refused
    finally:
        shutil.rmtree(d)
