import os
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
