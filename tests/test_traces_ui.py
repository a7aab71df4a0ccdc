"""The MLflow UI, started as the README says, lists the traces of an evaluate run: a real `mlflow ui` on 127.0.0.1
and a real headless Chromium (Playwright) reading its Traces tab.

Slow (the UI server starts in ≈12 s, the page loads a large bundle); skipped without a Chromium, as the render
tests are."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sweet import render as R
from tests._prefect_server import free_port
from tests.test_traces import PROMPT, _run

OK, WHY = R.browser_available()


@pytest.fixture
def mlflow_ui(tmp_path):
    """`mlflow ui --backend-store-uri sqlite:///<tmp>/m.db --host 127.0.0.1` (the README's command, another store and
    a free port); yields its URL, stopped afterwards."""
    port = free_port()
    exe = Path(sys.executable).with_name("mlflow")
    argv = [str(exe), "ui", "--backend-store-uri", f"sqlite:///{tmp_path}/m.db", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(argv, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow ui did not come up on {url} (exit code {proc.poll()})") from None
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@pytest.mark.slow
@pytest.mark.skipif(not OK, reason=f"no browser: {WHY}")
def test_the_mlflow_ui_lists_an_evaluate_runs_traces(tmp_path, monkeypatch, mlflow_ui):
    from playwright.sync_api import sync_playwright

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    *_, run_id, traces = _run(tmp_path, "sample")  # 2 systems x 2 traces, in <tmp>/m.db
    assert len(traces) == 4
    experiment = traces[0].info.experiment_id
    names = {t.info.tags["mlflow.traceName"] for t in traces}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=None if WHY == "playwright" else WHY)
        try:
            page = browser.new_page()
            answers = []  # the UI's API calls about traces
            page.on("response", lambda r: answers.append(r) if "/ajax-api/" in r.url and "trace" in r.url else None)
            page.goto(f"{mlflow_ui}/#/experiments/{experiment}/traces", timeout=120_000)
            # The table shows them: a trace's name or its request (the task the agent saw) ...
            shown = page.get_by_text(PROMPT[:16]).or_(page.get_by_text(sorted(names)[0]))
            shown.first.wait_for(state="visible", timeout=120_000)
            # ... and what the page asked the server for holds every trace of the run.
            listed = "".join(r.text() for r in answers if r.ok)
            assert all(t.info.trace_id in listed for t in traces), [r.url for r in answers]
        finally:
            browser.close()
