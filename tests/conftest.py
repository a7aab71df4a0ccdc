import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

# Isolate the orchestrator and tracking state of the test session from the user's own runs.
_TMP = Path(tempfile.mkdtemp(prefix="sweet-tests-"))
os.environ.setdefault("PREFECT_HOME", str(_TMP / "prefect"))
os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(_TMP / "prefect-results"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Flows talk to the one server of the `prefect_api` fixture, never to a user's server nor to an ephemeral one that
# a flow would start on its own (whose start-up wait is short and fixed): a flow test without the fixture fails at
# once with "No Prefect API URL provided" (see the hint added to such failures below).
os.environ.pop("PREFECT_API_URL", None)
os.environ["PREFECT_SERVER_ALLOW_EPHEMERAL_MODE"] = "false"
# Every process this session starts inherits this; the leak check at the end finds them by it.
SESSION_TAG = "SWEET_TESTS_SESSION"
os.environ[SESSION_TAG] = str(_TMP)
atexit.register(shutil.rmtree, _TMP, True)  # after Prefect's own exit hooks, which may still write under it

ROOT = Path(__file__).resolve().parents[1]
# The converted models are reused across test sessions (and with `make run`) rather than rebuilt per session.
MODELS_DIR = ROOT / "artifacts" / "models"


import pytest  # noqa: E402


@pytest.fixture
def openai_server():
    """A started OpenAI-compatible stub server on 127.0.0.1 (see tests/openai_stub.py); stopped afterwards."""
    from tests.openai_stub import OpenAIStub
    with OpenAIStub() as server:
        yield server


@pytest.fixture(scope="session")
def prefect_api():
    """The session's Prefect server (started on first use, one per session; see tests/_prefect_server.py), set as
    PREFECT_API_URL for the rest of the session, in this process and in the processes it starts. Yields its URL.
    Request it (or `pytest.mark.usefixtures("prefect_api")`) in every test that runs a flow or talks to Prefect."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests._prefect_server import PrefectServer

    server = PrefectServer(_TMP / "prefect-server")
    url = server.start()
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            # Also the process-wide default, for contexts copied before this point (as prefect_test_harness does;
            # older Prefect releases have no such helper).
            make_global = getattr(prefect.context, "_temporary_global_settings_context", None)
            with make_global(prefect.context.get_settings_context()) if make_global else contextlib.nullcontext():
                try:
                    yield url
                finally:
                    _drain_prefect_workers()
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        server.stop()


def _drain_prefect_workers() -> None:
    """Send the logs and events still queued in this process before the server goes (else they are retried
    against a closed port at exit)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain():
        for drain_call in (lambda: APILogWorker.drain_all(timeout=30), lambda: EventsWorker.drain_all(timeout=30)):
            try:
                result = drain_call()
                if inspect.isawaitable(result):
                    await result
            except RuntimeError:  # never started
                pass

    try:
        run_coro_as_sync(drain())
    except Exception as e:  # noqa: BLE001 - teardown goes on; the leak check still runs
        print(f"conftest: draining Prefect's log/event workers failed: {e!r}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and "No Prefect API URL provided" in str(call.excinfo.value):
        report.sections.append(("sweet-rl tests", "This test runs a flow or uses the Prefect API without the "
                                "session's server: request the `prefect_api` fixture (tests/conftest.py)."))


# ------------------------------------------------------------------------------------------------ leak check
# Multiprocessing's helper processes end by themselves when this process exits (their pipe closes).
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _leftover_processes():
    """Processes still alive that this session started: descendants of this process, and anything else (e.g.
    daemonised and re-parented) whose environment carries this session's tag."""
    import psutil

    me = psutil.Process()
    found = {}
    for p in me.children(recursive=True):
        found[p.pid] = p
    for p in psutil.process_iter(["pid"]):
        if p.pid == me.pid or p.pid in found:
            continue
        try:
            if p.environ().get(SESSION_TAG) == str(_TMP):
                found[p.pid] = p
        except (psutil.Error, OSError):  # another user's process, or gone
            continue
    alive = []
    for p in found.values():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if any(h in cmd for h in _HELPERS):
            continue
        alive.append((p, cmd))
    return alive


def _close_project_pools() -> None:
    """The project's own exit hooks for what it keeps open on purpose (pooled browsers, vLLM engines, llama.cpp
    servers, sandbox fork servers): run now, so that what they would close at exit is not reported as a leak."""
    import sys

    render = sys.modules.get("sweet.render")
    if render is not None:
        render._close_all()
    vllm = sys.modules.get("sweet.agents.vllm_backend")
    if vllm is not None:
        vllm.shutdown_engines()
    llama = sys.modules.get("sweet.agents._llama_server")
    if llama is not None:
        llama.close_all()
    sandbox = sys.modules.get("sweet.sandbox._pool")
    if sandbox is not None:
        sandbox.shutdown()


@pytest.hookimpl(trylast=True)  # after pytest's own session teardown (session fixtures included)
def pytest_sessionfinish(session, exitstatus):
    import psutil

    try:
        _close_project_pools()
    except Exception as e:  # noqa: BLE001
        print(f"conftest: closing the project's pools failed: {e!r}")
    leaks = _leftover_processes()
    if not leaks:
        return
    procs = [p for p, _ in leaks]
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(procs, timeout=10)
    for p in still:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(still, timeout=10)
    lines = [f"  pid {p.pid}: {cmd[:300]}" for p, cmd in leaks]
    message = (f"{len(leaks)} process(es) started by this test session were still running when it ended and were "
               "terminated (a test or fixture does not stop what it starts):\n" + "\n".join(lines))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "leaked processes", red=True)
        reporter.write_line(message)
    else:
        print(message)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    shutil.rmtree(_TMP, ignore_errors=True)
