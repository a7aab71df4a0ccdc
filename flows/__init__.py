"""Prefect flows: `full` (the `sweet-rl` flow) and one flow per stage for single-stage reruns."""

import tasks  # noqa: F401  (sets where cached task results live before Prefect reads its settings)
