# Shared helpers for topology launchers. Source it; do not run it.
#   start_role NAME cmd...   run one role in the background (log + pid file)
#   wait_any_exit            end the script when the first role exits, with its code
#   port VAR DEFAULT         a port from the environment (required under HARNESS_MANAGED_PORTS=1)
#   engine_args LAYOUT ROLE SHARE   vLLM flags for the tier (HARNESS_DEVICE=cpu|gpu), one place
#   gpu_for POSITION         the GPU a role gets in the lease under the layout (XPU: start_role
#                            turns it into ZE_AFFINITY_MASK)
# shellcheck shell=bash

HARNESS_DEVICE=${HARNESS_DEVICE:-gpu}  # cpu | gpu (CUDA) | xpu (Intel, Level Zero)
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
    _exec_role "$@" >"$HARNESS_LOG_DIR/$name.log" 2>&1 &
    echo $! >"$HARNESS_LOG_DIR/$name.pid"
  else
    _exec_role "$@" > >(sed -u "s/^/[$name] /") 2>&1 &
  fi
  _roles+=("$name")
  _pids+=("$!")
  echo "launcher: started $name pid $!" >&2
}

# One role's process. On XPU the device the role was given (CUDA_VISIBLE_DEVICES=$(gpu_for N),
# as on CUDA) becomes its Level Zero device: ZE_AFFINITY_MASK, as upstream's XPU launchers set.
_exec_role() {
  if [[ $HARNESS_DEVICE == xpu && -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    # env -u: `unset` would only drop the role's binding and uncover the lease's whole list
    exec env -u CUDA_VISIBLE_DEVICES ZE_AFFINITY_MASK="$CUDA_VISIBLE_DEVICES" "$@"
  fi
  exec "$@"
}

_stop_roles() {
  local pid
  for pid in "${_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# The launcher contract in files, beside each role's pid file (read by harness/runtime/roles.py):
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
PYTHON=${PYTHON:-python3}

if [[ $HARNESS_DEVICE == cpu ]]; then
  export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=nobind
  export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
  # NIXL's progress thread otherwise spins a core per agent (harness shim reads this).
  export HARNESS_NIXL_PTHR_DELAY_US=${HARNESS_NIXL_PTHR_DELAY_US:-1000}
fi

# vLLM engine flags of one role for the tier: engine_args LAYOUT ROLE SHARE.
# GPU: the role's memory in bytes from the harness's plan (harness/resources/memory_plan.py):
# the KV cache, the limits it was sized for, and a --gpu-memory-utilization that only clears
# vLLM's free-memory precheck. By hand (no plan) the role gets SHARE of its GPU, as upstream.
engine_args() {
  local layout=${1:-default} role=${2:-worker} share=${3:-0.9}
  if [[ $HARNESS_DEVICE == cpu ]]; then
    # float32: (1) on a CPU with AMX, vLLM-CPU 0.32 runs bf16 attention with its AMX kernel,
    # which dies with SIGILL on the E/P/D decode worker (seen on a Sapphire Rapids VM; the CPU
    # attention backend needs a block size that is a multiple of 32, so the block size cannot
    # steer it away); (2) in float32 the answers equal HF transformers' own greedy answers
    # character for character over 100 tokens (the HF reference oracle), in float16 they drift
    # apart after ~50 characters on LLaVA. The tiny models make the cost negligible.
    echo "$(head -n 1 "$(dirname "${BASH_SOURCE[0]}")/cpu_engine_args")" \
      --kv-cache-memory-bytes "${HARNESS_CPU_KV_BYTES:-64M}"
    return
  fi
  local eager=()
  [[ $layout == single-gpu ]] && eager=(--enforce-eager)
  # vLLM's XPU build: eager, 64-token KV blocks (upstream xpu/disagg_multimodal_epd_xpu.sh)
  [[ $HARNESS_DEVICE == xpu ]] && eager=(--enforce-eager --block-size 64)
  if _memory_planned "$role"; then
    local key=${role^^}
    echo "${eager[@]}" --kv-cache-memory-bytes "$(managed "HARNESS_KV_BYTES_$key" 0)" \
      --gpu-memory-utilization "$(managed "HARNESS_GPU_UTIL_$key" "$share")" \
      --max-model-len "$(managed HARNESS_MAX_MODEL_LEN 4096)" \
      --max-num-seqs "$(managed HARNESS_MAX_NUM_SEQS 2)" \
      --max-num-batched-tokens "$(managed HARNESS_MAX_NUM_BATCHED_TOKENS 4096)"
  elif [[ $layout == single-gpu ]]; then
    echo "${eager[@]}" --gpu-memory-utilization "$share" --max-model-len 4096
  else
    echo --gpu-memory-utilization "$share"
  fi
}

# True when the harness planned this role's memory (or must have: HARNESS_MANAGED_PORTS=1).
_memory_planned() {
  local var=HARNESS_KV_BYTES_${1^^}
  [[ -n ${!var:-} || ${HARNESS_MANAGED_PORTS:-0} == 1 ]]
}

# Dynamo's Qwen-VL encode worker runs its own vLLM (vision tower only), sized by these variables
# and not by its command line (dynamo/vllm/multimodal_utils/model.py load_vision_model):
#   start_role encode env $(vllm_encoder_env encode) "$PYTHON" -m dynamo.vllm …
vllm_encoder_env() {
  [[ $HARNESS_DEVICE != cpu ]] && _memory_planned "$1" || return 0
  local key=${1^^}
  echo "DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES=$(managed "HARNESS_KV_BYTES_$key" 67108864)" \
    "DYN_VLLM_ENCODER_GPU_MEMORY_UTILIZATION=$(managed "HARNESS_GPU_UTIL_$key" 0.2)" \
    "DYN_VLLM_ENCODER_MAX_NUM_SEQS=$(managed HARNESS_MAX_NUM_SEQS 64)"
}

# The vLLM encode worker of the disaggregated launchers (system port DYN_SYSTEM_PORT1, the layout's
# GPU 0): an images-only worker that hands embeddings to the prefill/PD worker. It registers no
# health-check payload, so each launcher gives it a health source in front of the call:
#   DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]' start_vllm_encode_worker
start_vllm_encode_worker() {
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
    start_role encode env $(vllm_encoder_env encode) "$PYTHON" -m dynamo.vllm --model "$MODEL" \
    --served-model-name "$SERVED_MODEL_NAME" --disaggregation-mode encode --enable-multimodal \
    $(engine_args "$LAYOUT" encode 0.1) $(embedding_transfer_args) "${FRONTEND_DECODING[@]}"
}

# Refuse a tier the engine cannot run on: require_gpu_tier WHY (exit 2 with the reason).
require_gpu_tier() {
  [[ $HARNESS_DEVICE == gpu ]] || die "HARNESS_DEVICE=$HARNESS_DEVICE is not supported: $1"
}

# SGLang engine flags of one role: sglang_engine_args LAYOUT ROLE SHARE. SGLang sizes its KV pool
# from the memory free when it loads, minus `total x (1 - --mem-fraction-static)`; the harness
# derives that fraction from the role's slot on its card and caps the pool at the planned tokens
# (harness/resources/memory_plan.py static_fraction). By hand: SHARE and a 4096-token cap.
sglang_engine_args() {
  local layout=${1:-default} role=${2:-worker} share=${3:-0.8}
  if _memory_planned "$role"; then
    local key=${role^^} batch
    batch=$(managed HARNESS_MAX_NUM_BATCHED_TOKENS 4096)
    echo --mem-fraction-static "$(managed "HARNESS_MEM_FRACTION_$key" "$share")" \
      --max-running-requests "$(managed HARNESS_MAX_NUM_SEQS 2)" \
      --context-length "$(managed HARNESS_MAX_MODEL_LEN 4096)" \
      --max-total-tokens "$(managed "HARNESS_KV_TOKENS_$key" 4096)" \
      --chunked-prefill-size "$batch" --max-prefill-tokens "$batch"
  elif [[ $layout == single-gpu ]]; then
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

# Parse the shared launcher flags into LAYOUT, FRONTEND_DECODING and MM_EMBEDDING_CACHE (the
# encode worker's embedding cache, as upstream's SGLang cases pass it); anything else is an error.
parse_layout_args() {
  LAYOUT=default FRONTEND_DECODING=() MM_EMBEDDING_CACHE=()
  while (($#)); do
    case $1 in
      --single-gpu) LAYOUT=single-gpu ;;
      --frontend-decoding) FRONTEND_DECODING=(--frontend-decoding) ;;
      --multimodal-embedding-cache-capacity-gb)
        MM_EMBEDDING_CACHE=(--multimodal-embedding-cache-capacity-gb "${2:?a size in GB}")
        shift ;;
      *) die "unknown argument '$1' (expected --single-gpu, --frontend-decoding," \
        "--multimodal-embedding-cache-capacity-gb GB)" ;;
    esac
    shift
  done
}

# Which GPU a role gets under a layout: gpu_for ROLE_INDEX (0-based). Empty on the CPU tier.
# Indices are positions in the GPUs the harness leased (CUDA_VISIBLE_DEVICES), if it leased any.
gpu_for() {
  [[ $HARNESS_DEVICE == cpu ]] && return 0
  local index devices
  case $LAYOUT in
    single-gpu) index=0 ;;
    *) index=$1 ;;
  esac
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -ra devices <<<"$CUDA_VISIBLE_DEVICES"
    if ((index >= ${#devices[@]})); then  # inside $(…): stop the role like a missing port does
      echo "launcher: layout $LAYOUT needs GPU #$index; leased: $CUDA_VISIBLE_DEVICES" >&2
      echo "${_UNSET}GPU#$index"
      return 2
    fi
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
  [[ $HARNESS_DEVICE == xpu ]] && device=xpu
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
  start_role frontend "$PYTHON" -m dynamo.frontend --http-host 127.0.0.1 --http-port "$http" \
    "${FRONTEND_ARGS[@]}"
}

# The KV block size workers and a KV-aware router agree on: vLLM's default on CUDA (16); the CPU
# attention backend takes multiples of 32 only, and vLLM-CPU's default is 128.
kv_block_size() {
  if [[ $HARNESS_DEVICE == cpu ]]; then echo 128; else echo 16; fi
}

# The common start of every topology: layout flags, model defaults, event broker, frontend (with
# FRONTEND_ARGS, if the launcher set them first).
begin_topology() {
  parse_layout_args "$@"
  MODEL=${MODEL:-Qwen/Qwen3-VL-2B-Instruct}
  SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-$MODEL}
  start_event_broker
  start_frontend
}
