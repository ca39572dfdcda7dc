# Shared helpers for topology launchers. Source it; do not run it. A launcher says the
# topology's shape only, to upstream Dynamo's contract (its port variables, `python3 -m dynamo.<x>`
# by name, upstream's flags as a person would run them on GPUs); under the harness every role goes
# through the role adapter (harness/launch/role_adapter.py), the one place that maps a role to
# the tier, for our launchers and a Dynamo checkout's alike.
#   start_role NAME cmd...   run one role in the background (log + pid file)
#   wait_any_exit            end the script when the first role exits, with its code
#   port VAR DEFAULT         a port from the environment (required under HARNESS_MANAGED_PORTS=1)
#   gpu_for POSITION         the GPU position a role sits on under the layout (0 with --single-gpu)
# shellcheck shell=bash

HARNESS_LOG_DIR=${HARNESS_LOG_DIR:-}
FRONTEND_ARGS=()
_roles=()
_pids=()
die() { echo "launcher: $*" >&2; exit 2; }

# A value the harness must pass (a port, the GPU placement, a role's memory) that is missing inside
# `X=$(port …) start_role …` or an argument cannot stop the script from the $(…) subshell (set -e
# ignores it there), so `managed` also prints this marker and start_role refuses to start a role
# whose env or args carry it.
_UNSET=__harness_unset__

# managed VAR DEFAULT: $VAR, required under HARNESS_MANAGED_PORTS=1 (the harness passes it);
# DEFAULT only when a person runs the script by hand.
managed() {
  local var=$1 default=$2
  if [[ -n ${!var:-} ]]; then
    echo "${!var}"
  elif [[ ${HARNESS_MANAGED_PORTS:-0} == 1 ]]; then
    echo "launcher: variable $var is not set (HARNESS_MANAGED_PORTS=1: the harness passes it)" >&2
    echo "${_UNSET}$var"
    return 2
  else
    echo "$default"
  fi
}

# port VAR DEFAULT: a port from the environment (the port contract).
port() { managed "$@"; }

start_role() {
  local name=$1; shift
  if [[ "$*" == *"$_UNSET"* ]] || env | grep -q "=$_UNSET"; then
    _stop_roles
    die "not starting $name: a value the harness must pass is missing (see above)"
  fi
  if [[ -n $HARNESS_LOG_DIR ]]; then
    mkdir -p "$HARNESS_LOG_DIR"
    HARNESS_ROLE=$name exec "$@" >"$HARNESS_LOG_DIR/$name.log" 2>&1 &
    echo $! >"$HARNESS_LOG_DIR/$name.pid"
  else
    HARNESS_ROLE=$name exec "$@" > >(sed -u "s/^/[$name] /") 2>&1 &
  fi
  _roles+=("$name")
  _pids+=("$!")
  echo "launcher: started $name pid $!" >&2
}

_stop_roles() {
  local pid
  for pid in "${_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# The launcher contract in files, beside each role's pid file (read by harness/topology/roles.py):
#   $HARNESS_LOG_DIR/roles.started   every role this launcher started, one per line, written once
#                                    all are (the harness names a declared role missing from it)
#   $HARNESS_LOG_DIR/NAME.exit       the exit code of the first role to exit (it ends the script)
_write_contract() {
  [[ -n $HARNESS_LOG_DIR ]] || return 0
  printf '%s\n' "$2" >"$HARNESS_LOG_DIR/.$1.tmp" && mv "$HARNESS_LOG_DIR/.$1.tmp" "$HARNESS_LOG_DIR/$1"
}

wait_any_exit() {
  trap _stop_roles EXIT
  trap 'exit 143' TERM INT
  _write_contract roles.started "$(printf '%s\n' "${_roles[@]}")"
  echo "launcher: all roles started: ${_roles[*]}" >&2
  local code=0 i
  wait -n "${_pids[@]}" || code=$?
  for i in "${!_pids[@]}"; do
    if ! kill -0 "${_pids[$i]}" 2>/dev/null; then
      _write_contract "${_roles[$i]}.exit" "$code"
      echo "launcher: role ${_roles[$i]} (pid ${_pids[$i]}) exited with code $code" >&2
      break
    fi
  done
  exit "$code"
}

# Loopback-only, discovery-by-file Dynamo environment (no etcd, no NATS).
export DYN_DISCOVERY_BACKEND=${DYN_DISCOVERY_BACKEND:-file}
export DYN_FILE_KV=${DYN_FILE_KV:-$(mktemp -d -t dynamo-kv.XXXXXX)}
export DYN_REQUEST_PLANE=${DYN_REQUEST_PLANE:-tcp}
export DYN_EVENT_PLANE=${DYN_EVENT_PLANE:-zmq}
export DYN_HTTP_HOST=127.0.0.1 DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
export DYN_EVENT_PLANE_HOST=127.0.0.1 DYN_SYSTEM_HOST=127.0.0.1
export DYN_MM_ALLOW_INTERNAL=${DYN_MM_ALLOW_INTERNAL:-1}
export DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS=${DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS:-0}
export VLLM_HOST_IP=127.0.0.1 VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
# SGLang advertises this address for its disaggregation bootstrap server and NIXL KV transfer.
export SGLANG_HOST_IP=127.0.0.1
export PYTHONUNBUFFERED=1
# Under the harness, `python3` is the role adapter (launchers/lib/role_adapter_bin).
if [[ -n ${HARNESS_ROLE_ADAPTER:-} ]]; then
  export PATH="$(dirname "${BASH_SOURCE[0]}")/role_adapter_bin:$PATH"
fi

# Serve every event-plane socket through one loopback broker (Dynamo's PUB sockets bind 0.0.0.0).
start_event_broker() {
  local xsub xpub
  xsub=$(port ZMQ_XSUB_PORT 5557)
  xpub=$(port ZMQ_XPUB_PORT 5558)
  export DYN_ZMQ_BROKER_URL="xsub=tcp://127.0.0.1:$xsub , xpub=tcp://127.0.0.1:$xpub"
  start_role event_broker python3 "$(dirname "${BASH_SOURCE[0]}")/zmq_broker.py" "$xsub" "$xpub"
}

# Parse the shared launcher flags, as upstream's launchers take them: --model into MODEL, the
# layout into LAYOUT, FRONTEND_DECODING and MM_EMBEDDING_CACHE (the encode worker's embedding
# cache, as upstream's SGLang cases pass it). Anything else is an error, except in a launcher
# that sets WORKER_ARGS_ACCEPTED=1 before begin_topology: there it goes to its worker in
# WORKER_ARGS, as upstream's agg_multimodal.sh forwards its EXTRA_ARGS (Gemma-4's --dtype).
parse_layout_args() {
  LAYOUT=default FRONTEND_DECODING=() MM_EMBEDDING_CACHE=() WORKER_ARGS=()
  while (($#)); do
    case $1 in
      --model) MODEL=${2:?a model id}; shift ;;
      --single-gpu) LAYOUT=single-gpu ;;
      --frontend-decoding) FRONTEND_DECODING=(--frontend-decoding) ;;
      --multimodal-embedding-cache-capacity-gb)
        MM_EMBEDDING_CACHE=(--multimodal-embedding-cache-capacity-gb "${2:?a size in GB}")
        shift ;;
      *)
        [[ ${WORKER_ARGS_ACCEPTED:-0} == 1 ]] && { WORKER_ARGS+=("$1"); shift; continue; }
        die "unknown argument '$1' (expected --model ID, --single-gpu, --frontend-decoding," \
          "--multimodal-embedding-cache-capacity-gb GB)" ;;
    esac
    shift
  done
}

# The GPU position a role sits on under the layout: gpu_for ROLE_INDEX (0-based), as upstream's
# launchers set CUDA_VISIBLE_DEVICES; the role adapter turns it into the leased device.
gpu_for() {
  if [[ $LAYOUT == single-gpu ]]; then echo 0; else echo "$1"; fi
}

# dynamo.frontend reads its address from DYN_HTTP_HOST (above) and DYN_HTTP_PORT, as upstream's
# launchers leave it to.
start_frontend() {
  DYN_HTTP_PORT=$(port DYN_HTTP_PORT 8000) start_role frontend python3 -m dynamo.frontend \
    "${FRONTEND_ARGS[@]}"
}

# NIXL KV transfer between prefill and decode, as upstream's E/P/D launcher configures it: the
# lease outlives a slow P->D handoff (DYN_VLLM_KV_LEASE_DURATION, upstream's default 100 s).
KV_TRANSFER_CONFIG="{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\",\"kv_connector_extra_config\":{\"kv_lease_duration\":${DYN_VLLM_KV_LEASE_DURATION:-100}}}"

# vLLM's KV-event publisher of one worker on PORT, as upstream's launchers write it.
kv_events_config() {
  echo "{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"
}

# The common start of every topology: layout flags, the model, event broker, frontend (with
# FRONTEND_ARGS, if the launcher set them first).
begin_topology() {
  MODEL=Qwen/Qwen3-VL-2B-Instruct
  parse_layout_args "$@"
  start_event_broker
  start_frontend
}

# SGLang's memory flags of one role by hand: sglang_engine_args LAYOUT SHARE. Packed on one GPU,
# SHARE of it and a 4096-token cap, as upstream's single-GPU launchers; otherwise SGLang's own
# sizing. Under the harness the role adapter replaces them with the role's planned ones.
sglang_engine_args() {
  local layout=${1:-default} share=${2:-0.8}
  if [[ $layout == single-gpu ]]; then
    echo --mem-fraction-static "$share" --max-running-requests 2 --chunked-prefill-size 4096 \
      --max-prefill-tokens 4096 --context-length 4096 --max-total-tokens 4096
  fi
}
