# Shared helpers for topology launchers. Source it; do not run it.
#   start_role NAME cmd...   run one role in the background (log + pid file)
#   wait_any_exit            end the script when the first role exits, with its code
#   port VAR DEFAULT         a port from the environment (required under HARNESS_MANAGED_PORTS=1)
#   engine_args              device-tier engine flags (HARNESS_DEVICE=cpu|gpu), one place for both
# shellcheck shell=bash

HARNESS_DEVICE=${HARNESS_DEVICE:-gpu}
HARNESS_LOG_DIR=${HARNESS_LOG_DIR:-}
_roles=()
_pids=()

die() { echo "launcher: $*" >&2; exit 2; }

# A missing managed port inside `X=$(port …) start_role …` or an argument cannot stop the script
# from the $(…) subshell (set -e ignores it there), so port also prints this marker and
# start_role refuses to start a role whose env or args carry it.
_PORT_UNSET=__harness_port_unset__

port() {
  local var=$1 default=$2
  if [[ -n ${!var:-} ]]; then
    echo "${!var}"
  elif [[ ${HARNESS_MANAGED_PORTS:-0} == 1 ]]; then
    echo "launcher: port variable $var is not set (HARNESS_MANAGED_PORTS=1: every port must come from the harness)" >&2
    echo "${_PORT_UNSET}$var"
    return 2
  else
    echo "$default"
  fi
}

start_role() {
  local name=$1; shift
  if [[ "$*" == *"$_PORT_UNSET"* ]] || env | grep -q "=$_PORT_UNSET"; then
    _stop_roles
    die "not starting $name: a port variable is not set (see above)"
  fi
  if [[ -n $HARNESS_LOG_DIR ]]; then
    mkdir -p "$HARNESS_LOG_DIR"
    "$@" >"$HARNESS_LOG_DIR/$name.log" 2>&1 &
    echo $! >"$HARNESS_LOG_DIR/$name.pid"
  else
    "$@" > >(sed -u "s/^/[$name] /") 2>&1 &
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

wait_any_exit() {
  trap _stop_roles EXIT
  trap 'exit 143' TERM INT
  local code=0 i
  wait -n "${_pids[@]}" || code=$?
  for i in "${!_pids[@]}"; do
    if ! kill -0 "${_pids[$i]}" 2>/dev/null; then
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
PYTHON=${PYTHON:-python3}

if [[ $HARNESS_DEVICE == cpu ]]; then
  export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=nobind
  export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
  # NIXL's progress thread otherwise spins a core per agent (harness shim reads this).
  export HARNESS_NIXL_PTHR_DELAY_US=${HARNESS_NIXL_PTHR_DELAY_US:-1000}
fi

# Engine flags for the tier. $1: layout (default | single-gpu | two-gpu), $2: role share of one GPU.
engine_args() {
  local layout=${1:-default} share=${2:-0.9}
  if [[ $HARNESS_DEVICE == cpu ]]; then
    # float16, not bfloat16: on a CPU with AMX, vLLM-CPU 0.32 runs bf16 attention with its AMX
    # kernel, which dies with SIGILL on the E/P/D decode worker (seen on a Sapphire Rapids VM;
    # the CPU attention backend needs a block size that is a multiple of 32, so the block size
    # cannot steer it away). fp16 takes the portable AVX-512/AVX2 kernel on every x86 CPU.
    echo --max-model-len 2048 --dtype float16 --enforce-eager \
      --distributed-executor-backend uni --kv-cache-memory-bytes "${HARNESS_CPU_KV_BYTES:-64M}"
  elif [[ $layout == single-gpu ]]; then
    echo --gpu-memory-utilization "$share" --enforce-eager --max-model-len 4096
  else
    echo --gpu-memory-utilization "$share"
  fi
}

# Refuse a tier the engine cannot run on: require_gpu_tier WHY (exit 2 with the reason).
require_gpu_tier() {
  [[ $HARNESS_DEVICE == gpu ]] || die "HARNESS_DEVICE=$HARNESS_DEVICE is not supported: $1"
}

# SGLang engine flags. $1: layout, $2: --mem-fraction-static on one shared GPU. SGLang sizes
# its KV pool from the memory free when it loads, so co-located workers keep a high fraction
# and are bounded by a token cap instead (low fractions fail when the neighbours load first).
sglang_engine_args() {
  local layout=${1:-default} share=${2:-0.8}
  if [[ $layout == single-gpu ]]; then
    echo --mem-fraction-static "$share" --max-running-requests 2 --chunked-prefill-size 4096 \
      --max-prefill-tokens 4096 --context-length 4096 \
      --max-total-tokens "${HARNESS_SGLANG_KV_TOKENS:-4096}"
  fi
}

# Serve every event-plane socket through one loopback broker (Dynamo's PUB sockets bind 0.0.0.0).
start_event_broker() {
  local xsub xpub
  xsub=$(port ZMQ_XSUB_PORT 5557)
  xpub=$(port ZMQ_XPUB_PORT 5558)
  export DYN_ZMQ_BROKER_URL="xsub=tcp://127.0.0.1:$xsub , xpub=tcp://127.0.0.1:$xpub"
  start_role event_broker "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/zmq_broker.py" "$xsub" "$xpub"
}

# Parse the shared launcher flags into LAYOUT and FRONTEND_DECODING; anything else is an error.
parse_layout_args() {
  LAYOUT=default FRONTEND_DECODING=()
  while (($#)); do
    case $1 in
      --single-gpu) LAYOUT=single-gpu ;;
      --two-gpu) LAYOUT=two-gpu ;;
      --frontend-decoding) FRONTEND_DECODING=(--frontend-decoding) ;;
      *) die "unknown argument '$1' (expected --single-gpu, --two-gpu, --frontend-decoding)" ;;
    esac
    shift
  done
}

# Which GPU a role gets under a layout: gpu_for ROLE_INDEX (0-based). Empty on the CPU tier.
# Indices are positions in the GPUs the harness leased (CUDA_VISIBLE_DEVICES), if it leased any.
gpu_for() {
  [[ $HARNESS_DEVICE == gpu ]] || return 0
  local index devices
  case $LAYOUT in
    single-gpu) index=0 ;;
    two-gpu) index=$(($1 > 0 ? 1 : 0)) ;;
    *) index=$1 ;;
  esac
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -ra devices <<<"$CUDA_VISIBLE_DEVICES"
    ((index < ${#devices[@]})) || die "layout $LAYOUT needs GPU #$index; leased: $CUDA_VISIBLE_DEVICES"
    echo "${devices[$index]}"
  else
    echo "$index"
  fi
}

# How media embeddings travel encode -> prefill. nixl-write pre-allocates 8 GiB: not on CPU.
embedding_transfer_args() {
  if [[ $HARNESS_DEVICE == cpu ]]; then echo --embedding-transfer-mode local; fi
}

# KV transfer between prefill and decode (NIXL; CPU buffers on the CPU tier).
kv_transfer_args() {
  local device=cuda
  [[ $HARNESS_DEVICE == cpu ]] && device=cpu
  echo --kv-transfer-config \
    "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\",\"kv_buffer_device\":\"$device\"}"
}

# The frontend decodes media itself only with NIXL's C library on the loader path.
nixl_lib_path() {
  "$PYTHON" - <<'PY' 2>/dev/null || true
import glob, os, site
for d in site.getsitepackages():
    for lib in sorted(glob.glob(os.path.join(d, ".nixl_cu*.mesonpy.libs"))):
        print(lib)
        raise SystemExit
PY
}

start_frontend() {
  local http
  http=$(port DYN_HTTP_PORT 8000)
  if ((${#FRONTEND_DECODING[@]})); then
    local lib
    lib=$(nixl_lib_path)
    export LD_LIBRARY_PATH=${lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  start_role frontend "$PYTHON" -m dynamo.frontend --http-host 127.0.0.1 --http-port "$http"
}

# The common start of every topology: layout flags, model defaults, event broker, frontend.
begin_topology() {
  parse_layout_args "$@"
  MODEL=${MODEL:-Qwen/Qwen3-VL-2B-Instruct}
  SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-$MODEL}
  start_event_broker
  start_frontend
}
