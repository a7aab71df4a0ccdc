"""Sandbox for model-written ColBench answers: scoring semantics and hostile answers.  Fast (< ~30 s)."""

import os
import socket
import time

import pytest

from sweet.colbench import sandbox
from sweet.colbench.sandbox import (
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


@pytest.mark.skipif(not IS_ROOT, reason="file protection relies on dropping root to a sandbox uid")
def test_cannot_touch_files_outside_its_dir(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    code = (f"import os\ndef rm():\n    os.remove({str(victim)!r})\n"
            f"def write():\n    open({str(tmp_path / 'new.txt')!r}, 'w').write('x')\n"
            "def chmod():\n    os.chmod(__import__('sys').executable, 0o777)\n"
            "def uid():\n    return os.getuid() != 0 and os.geteuid() != 0\n")
    res = run_calls(code, ["rm()", "write()", "chmod()", "uid()"])
    assert [ok for ok, _ in res[:3]] == [False, False, False] and all("PermissionError" in v for _, v in res[:3])
    assert res[3] == (True, True)
    assert victim.read_text() == "keep me" and not (tmp_path / "new.txt").exists()


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
