"""The sandbox's fork servers (``sweet.sandbox._pool``/``_server``): reuse, replacement of a dead server without a
lost answer, per-answer isolation under one server, and no process left behind.  Needs layer 1 (root)."""

import os
import signal
import threading
import time

import psutil
import pytest

from sweet import sandbox
from sweet.sandbox import _pool, evaluate_many, run_calls

REF = "def f(x):\n    return x * 2\n"
TESTS = [f"f({i})" for i in range(10)]

pytestmark = pytest.mark.skipif("pidns" not in sandbox.protections(),
                                reason="the fork server needs layer 1 (root: namespaces); answers are spawned here")


@pytest.fixture(autouse=True)
def _fresh_servers(monkeypatch):
    monkeypatch.setattr(sandbox, "STARTUP_GRACE_S", 2.0)
    sandbox.shutdown()
    yield
    sandbox.shutdown()


def _server_procs():
    """Our fork server processes still alive (the ones we started and their pid-1 children), zombies excluded."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and any("_server.py" in a for a in p.cmdline()):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def test_one_server_serves_many_answers():
    reports = evaluate_many([(REF, REF, TESTS)] * 20 + [("def f(x):\n    return x\n", REF, TESTS)], workers=1)
    assert [r.passed for r in reports] == [10] * 20 + [1]
    assert len(_pool.server_pids()) == 1
    pid = _pool.server_pids()[0]
    evaluate_many([(REF, REF, TESTS)] * 8, workers=2)
    assert pid in _pool.server_pids() and len(_pool.server_pids()) <= 2  # kept for the next batch
    # a looping answer is killed in its own child; the server stays
    assert run_calls("def f():\n    while True:\n        pass\n", ["f()", "1"], timeout_s=0.5) == \
        [(False, "timeout"), (True, 1)]
    assert pid in _pool.server_pids()


def test_answers_under_one_server_are_isolated_from_each_other():
    code = ("import os, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "def fds():\n    out = []\n    for fd in range(4096):\n        try:\n            os.fstat(fd)\n"
            "            out.append(fd)\n        except OSError:\n            pass\n    return out\n")
    first = run_calls(code, ["os.getuid()", "open('left.txt', 'w').write('x')", "os.getcwd()",
                             "libc.shmget(0x5eed, 4096, 0o1666) >= 0", "fds()"])
    second = run_calls(code, ["os.getuid()", "os.listdir('.')", "os.getcwd()", "libc.shmget(0x5eed, 0, 0)", "fds()"])
    assert len(_pool.server_pids()) == 1  # both ran under the same server
    assert first[0][0] and second[0][0] and first[0] != second[0]  # a uid of its own each
    assert first[1] == (True, 1) and first[3] == (True, True)
    assert second[1] == (True, []) and second[3] == (True, -1)  # neither the file nor the IPC segment is there
    assert first[2] == second[2]  # the same path, a fresh tmpfs each time
    assert first[4] == second[4] == (True, [0, 1, 2, 3, 4])  # its two pipes and /dev/null: nothing of the server


def test_an_answer_cannot_signal_or_see_the_server():
    [pid] = _pool.server_pids() or [None]
    if pid is None:
        run_calls("", ["1"])
        [pid] = _pool.server_pids()
    code = "import os, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\ndef hit(p, s):\n    return libc.kill(p, s)\n"
    calls = ["os.getppid()", "hit(1, 9)", "hit(os.getppid(), 9)", f"hit({pid}, 9)", "hit(-1, 9)", "hit(0, 0)",
             "[p for p in range(1, 4096) if p != os.getpid() and hit(p, 0) == 0]"]
    res = run_calls(code, calls)
    assert res[0] == (True, 1)  # its parent is the server, pid 1 of a namespace holding only the two of them
    assert res[1:5] == [(True, -1)] * 4 and res[5] == (True, 0) and res[6] == (True, []), res
    time.sleep(0.1)
    assert _pool.server_pids() == [pid] and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert run_calls(REF, ["f(4)"]) == [(True, 8)] and _pool.server_pids() == [pid]


def test_killed_servers_are_replaced_without_losing_an_answer():
    slow = "import time\ndef f(x):\n    time.sleep(0.02)\n    return x * 2\n"
    items = [(slow, REF, TESTS)] * 40 + [(REF, REF, TESTS)] * 10
    killed = []

    def killer():
        deadline = time.monotonic() + 30
        while len(killed) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
            pids = [p for p in _pool.server_pids() if p not in killed]
            if not pids:
                continue
            target = psutil.Process(pids[0])
            if not killed:
                os.kill(target.pid, signal.SIGKILL)  # the process we started
            else:  # the server proper, pid 1 of its namespace, which runs the children
                [inner] = target.children()
                os.kill(inner.pid, signal.SIGKILL)
            killed.append(target.pid)

    t = threading.Thread(target=killer)
    t.start()
    try:
        reports = evaluate_many(items, workers=2)
    finally:
        t.join()
    assert len(killed) == 2
    assert [r.passed for r in reports] == [10] * 50 and all(r.error is None for r in reports)
    assert not set(killed) & set(_pool.server_pids())
    assert run_calls(REF, ["f(1)"]) == [(True, 2)]


def test_no_server_outlives_shutdown():
    evaluate_many([(REF, REF, TESTS)] * 4, workers=2)
    assert _pool.server_pids() and _server_procs()
    sandbox.shutdown()
    assert _pool.server_pids() == [] and _server_procs() == []
    assert run_calls(REF, ["f(2)"]) == [(True, 4)]  # started again on demand
    sandbox.shutdown()
    assert _server_procs() == []


def test_spawn_path_stays_available(monkeypatch):
    monkeypatch.setattr(sandbox, "FORK_SERVER", False)
    layers = sandbox.protections()
    assert "pidns" not in layers and "uid" in layers and "mountns" in layers
    assert evaluate_many([(REF, REF, TESTS)] * 2)[0].success and _pool.server_pids() == []


def test_a_server_that_cannot_start_falls_back_to_spawning(monkeypatch, caplog):
    monkeypatch.setattr(_pool, "SERVER_SCRIPT", "/nonexistent/_server.py")
    assert run_calls(REF, ["f(3)"]) == [(True, 6)]
    assert "fork server cannot start" in caplog.text and _pool.server_pids() == []
