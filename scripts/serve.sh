#!/usr/bin/env bash
# make serve / make stop: a Prefect server, a process work pool + worker, the deployments, and the MLflow UI,
# all bound to 127.0.0.1. PIDs and logs live in artifacts/.serve/.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}; BIN=$(cd "$VENV/bin" && pwd)
STATE=artifacts/.serve; mkdir -p "$STATE"
PREFECT_PORT=${PREFECT_PORT:-4200}; MLFLOW_PORT=${MLFLOW_PORT:-5000}
POOL=sweet-pool  # the work pool named in prefect.yaml
export PREFECT_API_URL="http://127.0.0.1:${PREFECT_PORT}/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false MLFLOW_DISABLE_TELEMETRY=true SWEET_ROOT="$PWD"
# Flow runs started by the worker import Prefect before any project code: set where cached results live here.
export PREFECT_LOCAL_STORAGE_PATH="$PWD/artifacts/.prefect-results"
export PATH="$BIN:$PATH"

start_bg() {  # name, command...
  local name=$1; shift
  if [ -f "$STATE/$name.pid" ] && kill -0 "$(cat "$STATE/$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$STATE/$name.pid"))"; return; fi
  setsid nohup "$@" > "$STATE/$name.log" 2>&1 &
  echo $! > "$STATE/$name.pid"
  echo "started $name (pid $!, log $STATE/$name.log)"
}

wait_http() {  # url, seconds
  for _ in $(seq "$2"); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "timed out waiting for $1" >&2; return 1
}

case "${1:-}" in
start)
  start_bg prefect-server prefect server start --host 127.0.0.1 --port "$PREFECT_PORT"
  start_bg mlflow mlflow ui --backend-store-uri "sqlite:///$PWD/artifacts/mlflow.db" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1
  wait_http "$PREFECT_API_URL/health" 90
  prefect work-pool inspect "$POOL" >/dev/null 2>&1 || prefect work-pool create "$POOL" --type process >/dev/null
  prefect --no-prompt deploy --all > "$STATE/deploy.log" 2>&1 || { tail -20 "$STATE/deploy.log"; exit 1; }
  start_bg worker prefect worker start --pool "$POOL" --type process
  wait_http "http://127.0.0.1:$MLFLOW_PORT" 60 || true
  echo
  echo "Prefect UI:  http://127.0.0.1:$PREFECT_PORT      MLflow UI: http://127.0.0.1:$MLFLOW_PORT"
  echo "Run it:      PREFECT_API_URL=$PREFECT_API_URL $VENV/bin/prefect deployment run sweet-rl/full"
  echo "One stage:   ... prefect deployment run train-critic/stage   (list: prefect deployment ls)"
  ;;
stop)
  for name in worker mlflow prefect-server; do
    f="$STATE/$name.pid"; [ -f "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      # A worker ignores its first SIGTERM: TERM, then INT, then KILL what is left of the group.
      kill -TERM -- "-$pid" 2>/dev/null || true; sleep 1; kill -INT -- "-$pid" 2>/dev/null || true
      for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      echo "stopped $name"
    fi
    rm -f "$f"
  done
  ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
