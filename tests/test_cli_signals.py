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
