"""Prefect tasks: thin, cacheable wrappers around the stages in `sweet.stages`, one module per stage.

They pass paths, never models. The cache key of each is the stage's fingerprint (config slice + upstream
fingerprints + code), not Prefect's default policy, which includes the run id and never hits across runs.
"""

import os
from pathlib import Path

# Cached task results (tiny: a folder path each) live beside the run outputs, not in the user's home.
os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(Path("artifacts/.prefect-results").resolve()))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# One INFO line per HTTP request (API models) would drown the flow's log.
import logging  # noqa: E402

logging.getLogger("httpx").setLevel(logging.WARNING)
