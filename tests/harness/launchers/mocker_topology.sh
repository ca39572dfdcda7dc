#!/usr/bin/env bash
# Frontend + one real Dynamo mocker worker (real worker runtime, stand-in engine), for fault tests.
# Usage: mocker_topology.sh [--no-health-source] [--exit-launcher CODE] [--frontend-namespace NS]
#                           [--second-worker-model NAME] [--] [extra dynamo.mocker flags...]
#   --no-health-source        omit DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS: /health is 503 forever
#   --exit-launcher CODE      start the roles, then the launcher itself exits with CODE
#   --frontend-namespace NS   the frontend discovers models only in namespace NS
#   --second-worker-model N   once the worker is healthy, start a second mocker on the same
#                             endpoint serving model N (Dynamo refuses it: it exits 0, silently)
#   anything else             passed to the mocker worker (e.g. --startup-time 5, a bad flag)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../launchers/lib/common.sh"

HEALTH_ENV=(DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]')
EXIT_LAUNCHER='' FRONTEND_NS=() SECOND_MODEL='' WORKER_FLAGS=()
while (($#)); do
  case $1 in
    --no-health-source) HEALTH_ENV=() ;;
    --exit-launcher) EXIT_LAUNCHER=$2; shift ;;
    --frontend-namespace) FRONTEND_NS=(--namespace "$2"); shift ;;
    --second-worker-model) SECOND_MODEL=$2; shift ;;
    --) shift; WORKER_FLAGS+=("$@"); break ;;
    *) WORKER_FLAGS+=("$1") ;;
  esac
  shift
done

MODEL=${MODEL:?MODEL must name a model directory (config.json + tokenizer)}
SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-mocker}
WORKER_PORT=$(port DYN_SYSTEM_PORT1 8081)

start_event_broker
start_role frontend "$PYTHON" -m dynamo.frontend --http-host 127.0.0.1 \
  --http-port "$(port DYN_HTTP_PORT 8000)" "${FRONTEND_NS[@]}"

start_role worker env "${HEALTH_ENV[@]}" DYN_SYSTEM_PORT="$WORKER_PORT" \
  "$PYTHON" -m dynamo.mocker --model-path "$MODEL" \
  --model-name "$SERVED_MODEL_NAME" --speedup-ratio 0 "${WORKER_FLAGS[@]}"

if [[ -n $SECOND_MODEL ]]; then
  # Wait on a condition (the first worker healthy), not a sleep: the second must come second.
  until curl -sf "http://127.0.0.1:$WORKER_PORT/health" >/dev/null; do
    kill -0 "${_pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]' DYN_SYSTEM_PORT="$(port DYN_SYSTEM_PORT2 8082)" \
    start_role second_worker "$PYTHON" -m dynamo.mocker --model-path "$MODEL" \
    --model-name "$SECOND_MODEL" --speedup-ratio 0
fi

if [[ -n $EXIT_LAUNCHER ]]; then
  echo "launcher: exiting with code $EXIT_LAUNCHER before the topology is ready (fault test)" >&2
  exit "$EXIT_LAUNCHER"
fi

wait_any_exit
