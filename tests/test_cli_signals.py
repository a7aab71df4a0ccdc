"""`kill` on a running `sweet` command unwinds it like Ctrl-C: exit hooks run, so what it started is stopped.

Prefect's temporary API server (what `sweet run` starts when no PREFECT_API_URL is set) is stopped by an atexit hook;
a bare SIGTERM skips those hooks and left the server running after the command had gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child: an atexit hook (standing in for Prefect's server stop) and a `sweet config` whose config loading is
# replaced by a long sleep (standing in for a long run), so the signal arrives while main() is running.
CHILD = textwrap.dedent("""
    import atexit, sys, time
    from pathlib import Path
    from sweet import cli

    marker = Path(sys.argv[1])
    atexit.register(marker.write_text, "exit hooks ran")

    def long_run(*args, **kwargs):
        print("running", flush=True)
        time.sleep(60)

    cli.load_config = long_run
    cli.main(["config"])
""")


def test_sigterm_runs_the_exit_hooks(tmp_path):
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "running"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert marker.exists() and marker.read_text() == "exit hooks ran", proc.stderr.read()[-2000:]
    assert proc.returncode != 0  # still a failed command, not a clean exit


# The child: exit hooks that take a while (standing in for Prefect's server stop), a second SIGTERM sent meanwhile.
SLOW_CLEANUP = textwrap.dedent("""
    import atexit, sys, time
    from pathlib import Path
    from sweet import cli

    marker = Path(sys.argv[1])

    def slow_stop():
        print("cleaning", flush=True)
        time.sleep(2)
        marker.write_text("clean-up finished")

    atexit.register(slow_stop)

    def long_run(*args, **kwargs):
        print("running", flush=True)
        time.sleep(60)

    cli.load_config = long_run
    cli.main(["config"])
""")


def test_a_second_sigterm_does_not_interrupt_the_clean_up(tmp_path):
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CLEANUP, str(marker)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "running"
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "cleaning"
        proc.send_signal(signal.SIGTERM)  # while the exit hook runs
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert marker.exists() and marker.read_text() == "clean-up finished", err[-2000:]
    assert "already stopping" in err


# The child: a batch of chat requests, two at a time, to a server that takes 5 s per request (the test's stub,
# standing in for a llama-server generating); SIGTERM arrives while the first two are in flight. The stage's clean-up
# (stopping its llama-server, which ends those requests) can only run once `generate` has let go.
GENERATING = textwrap.dedent("""
    import signal, sys
    from sweet import cli
    from sweet.agents.api import ChatAPI

    signal.signal(signal.SIGTERM, cli._terminate)  # what `sweet` installs
    api = ChatAPI("m", sys.argv[1], api_key="none", concurrency=2, max_retries=4, backoff_s=0.1)
    print("running", flush=True)
    try:
        api.generate([[{"role": "user", "content": f"q{i}"}] for i in range(8)], 8)
        print("finished the whole batch", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise
""")


def test_sigterm_during_a_batch_returns_without_waiting_for_requests_in_flight():
    from tests.openai_stub import OpenAIStub

    with OpenAIStub(delay_s=5.0) as stub:
        proc = subprocess.Popen([sys.executable, "-c", GENERATING, stub.base_url], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert proc.stdout.readline().strip() == "running"
            for _ in range(200):  # until both first requests are in flight
                if stub.in_flight == 2:
                    break
                time.sleep(0.05)
            assert stub.in_flight == 2
            proc.send_signal(signal.SIGTERM)
            assert proc.stdout.readline().strip() == "interrupted"
            # generate() let go while its requests were still being served: the clean-up need not wait them out
            in_flight = stub.in_flight
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert in_flight == 2, "generate() waited for the requests in flight before it raised"
        assert proc.returncode != 0
        assert len(stub.requests) == 2, f"{len(stub.requests)} of 8 requests were sent: the queued ones were not dropped"
