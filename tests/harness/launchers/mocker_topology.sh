#!/usr/bin/env bash
# Frontend + one real Dynamo mocker worker (real worker runtime, stand-in engine), for fault tests.
# Usage: mocker_topology.sh [--model ID] [--no-health-source] [--exit-launcher CODE] [--frontend-namespace NS]
#                           [--] [extra dynamo.mocker flags...]
#   --no-health-source        omit DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS: /health is 503 forever
#   --exit-launcher CODE      start the roles, then the launcher itself exits with CODE
#   --frontend-namespace NS   the frontend discovers models only in namespace NS
#   --frontend-host HOST      the address the frontend binds (default 127.0.0.1)
#   --refuse MESSAGE          once the event broker runs, refuse as upstream's launchers do:
#                             "ERROR: MESSAGE" and exit 1, before starting any role
#   --worker-raises MESSAGE   the worker is a Python process that raises RuntimeError(MESSAGE)
#   --worker-crash-handler MESSAGE
#                             the worker's child logs a traceback ending RuntimeError(MESSAGE),
#                             then kills the worker's process tree (SGLang's kill_process_tree)
#   --fail-first-start FILE MESSAGE
#                             where FILE does not exist: create it, and the worker raises
#                             RuntimeError(MESSAGE); where it does, start as usual (a start-up
#                             failure that passes on a second try)
#   --worker-env NAME=VALUE   set in the mocker worker's environment
#   --as-a-checkout           wait as a checkout's launcher does: the first role to exit ends it,
#                             its exit trap stops the rest, and no exit order is recorded
#   anything else             passed to the mocker worker (e.g. --startup-time 5, a bad flag)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../launchers/lib/common.sh"

HEALTH_ENV=(DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]')
EXIT_LAUNCHER='' FRONTEND_NS=() FRONTEND_HOST=127.0.0.1 WORKER_FLAGS=() REFUSE='' RAISES=''
CRASH_HANDLER= AS_A_CHECKOUT=
while (($#)); do
  case $1 in
    --model) shift ;;  # the launcher contract's --model ID; the mocker serves $MODEL's directory
    --no-health-source) HEALTH_ENV=() ;;
    --exit-launcher) EXIT_LAUNCHER=$2; shift ;;
    --frontend-namespace) FRONTEND_NS=(--namespace "$2"); shift ;;
    --frontend-host) FRONTEND_HOST=$2; shift ;;
    --refuse) REFUSE=$2; shift ;;
    --worker-raises) RAISES=$2; shift ;;
    --worker-crash-handler) CRASH_HANDLER=$2; shift ;;
    --worker-env) HEALTH_ENV+=("$2"); shift ;;
    --as-a-checkout) AS_A_CHECKOUT=1 ;;
    --fail-first-start)
      if [[ ! -e $2 ]]; then : >"$2"; RAISES=$3; fi
      shift 2 ;;
    --) shift; WORKER_FLAGS+=("$@"); break ;;
    *) WORKER_FLAGS+=("$1") ;;
  esac
  shift
done

MODEL=${MODEL:?MODEL must name a model directory (config.json + tokenizer)}
SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-mocker}

HTTP_PORT=$(port DYN_HTTP_PORT 8000)
WORKER_PORT=$(port DYN_SYSTEM_PORT1 8081)

start_event_broker
if [[ -n $REFUSE ]]; then
  echo "ERROR: $REFUSE"
  exit 1
fi
start_role frontend "$PYTHON" -m dynamo.frontend --http-host "$FRONTEND_HOST" \
  --http-port "$HTTP_PORT" "${FRONTEND_NS[@]}"

if [[ -n $RAISES ]]; then
  start_role worker "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/../role_doubles.py" raises "$RAISES"
elif [[ -n $CRASH_HANDLER ]]; then
  start_role worker "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/../role_doubles.py" \
    crash-handler "$CRASH_HANDLER"
else
  start_role worker env "${HEALTH_ENV[@]}" DYN_SYSTEM_PORT="$WORKER_PORT" \
    "$PYTHON" -m dynamo.mocker --model-path "$MODEL" \
    --model-name "$SERVED_MODEL_NAME" --speedup-ratio 0 "${WORKER_FLAGS[@]}"
fi

if [[ -n $EXIT_LAUNCHER ]]; then
  echo "launcher: exiting with code $EXIT_LAUNCHER before the topology is ready (fault test)" >&2
  exit "$EXIT_LAUNCHER"
fi

if [[ -n $AS_A_CHECKOUT ]]; then
  trap _stop_roles EXIT
  wait -n
  exit 1
fi
wait_any_exit
