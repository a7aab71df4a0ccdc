"""sweet-rl: SWEET-RL on ColBench, as a library; `flows/` and `tasks/` orchestrate it with Prefect.

The layers, lowest first. A module imports only from its own layer or lower ones (tests/test_layers.py reads the
import graph from the source and enforces it, with no cycles, no private names across modules, and no Prefect
inside sweet/):

1. infrastructure  config (+ engine_config, family_config), profiles, store (DuckDB/Parquet), records (row types), tracking (MLflow), models
                   (weights, devices), chat (the text-generation contract), graph (the method graph, as data),
                   pipeline + codehash (fingerprints), launch (`accelerate launch`)
2. machinery       sandbox (runs untrusted code), render (pages in a browser): general, know nothing of ColBench
3. environments    colbench: tasks, episodes, simulators, scoring; never know a learner
4. agents          agents: policy and simulator backends (transformers, vLLM, OpenAI-compatible APIs)
5. algorithms      algos: losses, critic, actor, baselines, scoring with a trained critic
6. stages          stages: the seven stage functions; train (the entry point `accelerate launch` runs)
7. orchestration   tasks, flows (Prefect: the only place it is imported)
8. entry points    cli (the `sweet` command, which runs flows)
"""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("infrastructure", ("sweet", "sweet.config", "sweet.engine_config", "sweet.family_config", "sweet.stage_config",
                        "sweet.profiles", "sweet.store",
                        "sweet.records", "sweet.tracking", "sweet.models", "sweet.precision", "sweet.chat", "sweet.graph",
                        "sweet.pipeline",
                        "sweet.codehash", "sweet.launch")),
    ("machinery", ("sweet.sandbox", "sweet.render")),
    ("environments", ("sweet.colbench",)),
    ("agents", ("sweet.agents",)),
    ("algorithms", ("sweet.algos",)),
    ("stages", ("sweet.stages", "sweet.train")),
    ("orchestration", ("tasks", "flows")),
    ("entry points", ("sweet.cli",)),
)
