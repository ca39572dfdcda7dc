"""Launchers in the shapes upstream Dynamo's current multimodal launchers take (read from
`examples/backends/{vllm,sglang}/launch/` and `examples/common/`; our own texts, no upstream
code), one per pattern a harness that reads launcher text for port variables cannot follow:

- `AGG`: the one worker on the unindexed `DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT:-8081}`, run in the
  foreground (the script blocks in it);
- `VLLM_ROUTER`: workers started in a loop, each one's system port read by indirect expansion
  (`HARNESS_VAR="DYN_SYSTEM_PORT${i}"; "${!HARNESS_VAR:-$DEFAULT}"`), its KV-event port offset
  from a base (`$((DYN_VLLM_KV_EVENT_PORT + i - 1))`), fail-fast liveness checks while it polls
  the workers' /health itself, and the frontend started last on `--http-port`;
- `VLLM_E_PD`: the encode worker and the PD worker on `${DYN_SYSTEM_PORTn:-808n}`, the encode
  worker with no health source unless `health_source` (upstream's E/PD as it ships);
- `VLLM_P_D`: `dyn_port` for the system, NIXL side-channel and KV-event port of each worker;
- `SGLANG_E_PD`: the PD worker first (index 2), then the encode worker (index 1), no embedding
  transfer mode, `unset DYN_SYSTEM_PORT` before the frontend;
- `SGLANG_ROUTER`: the indirect-expansion loop, KV-event ports from `KV_EVENTS_PORT_BASE`, worker
  health polled by the script, the frontend on `--http-port` once they are ready.

The E/P/D shape (`dyn_port`) lives in dynamo_checkout.py with the seed's variants."""

from __future__ import annotations

# The helpers upstream's launchers source (examples/common/launch_utils.sh, gpu_utils.sh), in
# their semantics: dyn_port fails naming the variable under DYN_MANAGED_PORTS, wait_any_exit
# refuses a script with no background job, wait_for_ready returns 2 when the pid it watches died.
LAUNCH_UTILS = r"""# Launcher helpers in the style of upstream examples/common/launch_utils.sh
dyn_port() {
  local name="$1$2" value
  value=${!name:-}
  if [[ -n ${DYN_MANAGED_PORTS:-} ]]; then
    if [[ ! $value =~ ^[0-9]+$ ]]; then
      echo "Missing or invalid managed port $name: '${value:-<unset>}'" >&2
      return 1
    fi
  fi
  echo "${value:-$3}"
}

print_launch_banner() {
  while [[ "${1:-}" == --* ]]; do shift; done
  echo "=========================================="
  echo "$1"
  echo "Model:       $2"
  echo "Frontend:    http://localhost:$3"
  echo "=========================================="
}

dynamo_reap_and_exit() { trap '' TERM INT; kill -TERM 0 2>/dev/null || true; wait; exit "$1"; }
dynamo_exit_trap() { local rc=$?; echo "Cleaning up..."; dynamo_reap_and_exit "$rc"; }

wait_any_exit() {
  trap 'dynamo_reap_and_exit 0' TERM INT
  if [[ -z "$(jobs -p)" ]]; then
    echo "wait_any_exit: no background processes found (did you forget '&'?)" >&2
    exit 1
  fi
  local rc=0
  wait -n || rc=$?
  echo "A background process exited with code $rc"
  dynamo_reap_and_exit "$rc"
}

wait_for_ready() {
  local url=$1 timeout=${2:-30} pid=${3:-} start=$SECONDS
  while (( SECONDS - start < timeout )); do
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      echo "WARNING: process $pid exited after $((SECONDS - start))s, before $url was ready" >&2
      return 2
    fi
    curl -sf --max-time 2 "$url" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "WARNING: $url not ready after ${timeout}s" >&2
  return 1
}
"""

GPU_UTILS = r"""# GPU memory helpers in the style of upstream examples/common/gpu_utils.sh
build_vllm_gpu_mem_args() {
  if [[ -n "${_PROFILE_OVERRIDE_VLLM_KV_CACHE_BYTES:-}" ]]; then
    echo "--kv-cache-memory-bytes $_PROFILE_OVERRIDE_VLLM_KV_CACHE_BYTES" \
      "--gpu-memory-utilization 0.01"
  fi
}
build_sglang_gpu_mem_args() {
  if [[ -n "${_PROFILE_OVERRIDE_SGLANG_MAX_TOTAL_TOKENS:-}" ]]; then
    echo "--max-total-tokens $_PROFILE_OVERRIDE_SGLANG_MAX_TOTAL_TOKENS --mem-fraction-static 0.9"
  fi
}
"""

AGG = r"""#!/bin/bash
# Aggregated multimodal: frontend + one worker (upstream's shape: the unindexed DYN_SYSTEM_PORT,
# the worker in the foreground).
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$SCRIPT_DIR/../../../common/gpu_utils.sh"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
MODEL_NAME="${DYN_MODEL_NAME:-Qwen/Qwen3-VL-30B-A3B-Instruct-FP8}"
EXTRA_ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    *) EXTRA_ARGS+=("$1"); shift ;;
  esac
done
HTTP_PORT="${DYN_HTTP_PORT:-8000}"
export DYN_REQUEST_PLANE=tcp
print_launch_banner --no-curl "Launching Aggregated Multimodal Serving" "$MODEL_NAME" "$HTTP_PORT"
python -m dynamo.frontend &
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}
MAX_CONCURRENT_SEQS=${MAX_CONCURRENT_SEQS:-2}
: "${_PROFILE_OVERRIDE_VLLM_KV_CACHE_BYTES:=922354000}"
GPU_MEM_ARGS=$(build_vllm_gpu_mem_args)
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} \
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT:-8081} \
  python -m dynamo.vllm --enable-multimodal --model $MODEL_NAME \
  --max-model-len "$MAX_MODEL_LEN" --max-num-seqs "$MAX_CONCURRENT_SEQS" \
  $GPU_MEM_ARGS "${EXTRA_ARGS[@]}"
wait_any_exit
"""

# The loop, the liveness check and the readiness polls the two router shapes share.
ROUTER_HEAD = r"""#!/bin/bash
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DYNAMO_ROOT="$(cd "${SCRIPT_DIR}/../../../.." && pwd)"
cd "${DYNAMO_ROOT}"
source "${SCRIPT_DIR}/../../../common/gpu_utils.sh"
source "${SCRIPT_DIR}/../../../common/launch_utils.sh"
MODEL="Qwen/Qwen3-VL-2B-Instruct"
HTTP_PORT="${HTTP_PORT:-${DYN_HTTP_PORT:-8000}}"
BLOCK_SIZE="${BLOCK_SIZE:-16}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-4096}"
NUM_WORKERS="${NUM_WORKERS:-2}"
SINGLE_GPU="${SINGLE_GPU:-false}"
STARTUP_TIMEOUT="${STARTUP_TIMEOUT:-330}"
PASSTHRU_ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL="$2"; shift 2 ;;
    --num-workers) NUM_WORKERS="$2"; shift 2 ;;
    --single-gpu) SINGLE_GPU="true"; shift ;;
    *) PASSTHRU_ARGS+=("$1"); shift ;;
  esac
done
print_launch_banner --multimodal --no-curl "MM Routing" "${MODEL}" "${HTTP_PORT}"
trap 'trap - EXIT INT TERM; echo; kill 0' EXIT INT TERM
WORKER_PIDS=()
WORKER_PORTS=()
check_workers_alive() {
  local i pid status
  for i in "${!WORKER_PIDS[@]}"; do
    pid="${WORKER_PIDS[i]}"
    if ! kill -0 "${pid}" 2>/dev/null; then
      status=0
      wait "${pid}" 2>/dev/null || status=$?
      echo "backend $((i + 1)) (pid ${pid}) exited with status ${status}" \
        "before startup completed" >&2
      return 1
    fi
  done
}
wait_ready() {
  local url="$1" name="$2" deadline="$3"
  while (( SECONDS < deadline )); do
    if curl -fsS --max-time 5 "${url}" 2>/dev/null \
        | grep -q '"status"[[:space:]]*:[[:space:]]*"ready"'; then
      echo "${name} is ready"
      return 0
    fi
    check_workers_alive || return 1
    sleep 1
  done
  echo "${name} did not become ready within the ${STARTUP_TIMEOUT}s startup budget" >&2
  return 1
}
DEADLINE=$((SECONDS + STARTUP_TIMEOUT))
"""

ROUTER_TAIL = r"""
for i in $(seq 1 "${NUM_WORKERS}"); do
  wait_ready "http://127.0.0.1:${WORKER_PORTS[i-1]}/health" "backend $i" "${DEADLINE}"
done
FRONTEND_ENV
python -m dynamo.frontend --http-port "${HTTP_PORT}" --router-mode kv \
  --kv-cache-block-size "${BLOCK_SIZE}" &
while (( SECONDS < DEADLINE )); do
  BODY="{\"model\":\"${MODEL}\",\"max_tokens\":1,"
  BODY+="\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
  code=$(curl -s -o /dev/null -w "%{http_code}" --max-time 10 \
    -X POST "http://127.0.0.1:${HTTP_PORT}/v1/chat/completions" \
    -H "Content-Type: application/json" -d "$BODY" || echo 000)
  [[ $code == 200 ]] && { echo "Frontend ready"; break; }
  check_workers_alive || exit 1
  sleep 2
done
wait_any_exit
"""

VLLM_ROUTER = (
    ROUTER_HEAD
    + r"""
VLLM_SYSTEM_PORT_BASE="${VLLM_SYSTEM_PORT_BASE:-18081}"
KV_EVENTS_PORT_BASE="${KV_EVENTS_PORT_BASE:-5557}"
GPU_MEM_ARGS=$(build_vllm_gpu_mem_args)
for i in $(seq 1 "${NUM_WORKERS}"); do
  DEFAULT_WORKER_PORT=$((VLLM_SYSTEM_PORT_BASE + (i - 1) * 2))
  HARNESS_VAR="DYN_SYSTEM_PORT${i}"
  WORKER_PORT="${!HARNESS_VAR:-${DEFAULT_WORKER_PORT}}"
  WORKER_PORTS+=("${WORKER_PORT}")
  if [[ -n "${DYN_VLLM_KV_EVENT_PORT:-}" ]]; then
    KV_EVENTS_PORT=$((DYN_VLLM_KV_EVENT_PORT + i - 1))
  else
    KV_EVENTS_PORT=$((KV_EVENTS_PORT_BASE + i - 1))
  fi
  if [[ "${SINGLE_GPU}" == "true" ]]; then GPU_ID=0; else GPU_ID=$((i - 1)); fi
  KV_EVENTS_CONFIG="{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:${KV_EVENTS_PORT}\"}"
  env "DYN_SYSTEM_PORT=${WORKER_PORT}" "CUDA_VISIBLE_DEVICES=${GPU_ID}" \
  python -m dynamo.vllm --model "${MODEL}" --enable-multimodal --block-size "${BLOCK_SIZE}" \
    --enforce-eager --max-model-len "${MAX_MODEL_LEN}" --kv-events-config "${KV_EVENTS_CONFIG}" \
    ${GPU_MEM_ARGS} "${PASSTHRU_ARGS[@]}" &
  WORKER_PIDS+=("$!")
done
"""
    + ROUTER_TAIL.replace(
        "FRONTEND_ENV\n", "env -u DYN_SYSTEM_PORT -u DYN_SYSTEM_PORT1 -u DYN_SYSTEM_PORT2 \\\n"
    )
)

SGLANG_ROUTER = (
    ROUTER_HEAD
    + r"""
SGLANG_SYSTEM_PORT_BASE="${SGLANG_SYSTEM_PORT_BASE:-18091}"
KV_EVENTS_PORT_BASE="${KV_EVENTS_PORT_BASE:-29090}"
GPU_MEM_ARGS=$(build_sglang_gpu_mem_args)
for i in $(seq 1 "${NUM_WORKERS}"); do
  DEFAULT_WORKER_PORT=$((SGLANG_SYSTEM_PORT_BASE + (i - 1) * 2))
  HARNESS_VAR="DYN_SYSTEM_PORT${i}"
  WORKER_PORT="${!HARNESS_VAR:-${DEFAULT_WORKER_PORT}}"
  WORKER_PORTS+=("${WORKER_PORT}")
  KV_EVENTS_PORT=$((KV_EVENTS_PORT_BASE + (i - 1)))
  if [[ "${SINGLE_GPU}" == "true" ]]; then GPU_ID=0; else GPU_ID=$((i - 1)); fi
  KV_EVENTS_CONFIG="{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:${KV_EVENTS_PORT}\"}"
  env "DYN_SYSTEM_PORT=${WORKER_PORT}" "CUDA_VISIBLE_DEVICES=${GPU_ID}" \
  python -m dynamo.sglang --model-path "${MODEL}" --served-model-name "${MODEL}" \
    --page-size "${BLOCK_SIZE}" --context-length "${MAX_MODEL_LEN}" --tp 1 --trust-remote-code \
    --kv-events-config "${KV_EVENTS_CONFIG}" --enable-metrics --disable-piecewise-cuda-graph \
    ${GPU_MEM_ARGS} "${PASSTHRU_ARGS[@]}" &
  WORKER_PIDS+=("$!")
done
"""
    + ROUTER_TAIL.replace("FRONTEND_ENV\n", "")
)

VLLM_E_PD = r"""#!/bin/bash
# E/PD multimodal: frontend, encode worker, PD worker (upstream's shape: ${DYN_SYSTEM_PORTn:-…}).
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/gpu_utils.sh"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
export DYN_REQUEST_PLANE=tcp
MODEL_NAME="Qwen/Qwen3-VL-30B-A3B-Instruct-FP8"
SINGLE_GPU=false
EXTRA_PD_ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    --single-gpu) SINGLE_GPU=true; shift ;;
    *) EXTRA_PD_ARGS+=("$1"); shift ;;
  esac
done
HTTP_PORT=${DYN_HTTP_PORT:-8000}
print_launch_banner --multimodal "Launching Disaggregated Multimodal E+PD" "$MODEL_NAME" \
  "$HTTP_PORT"
python -m dynamo.frontend &
unset DYN_SYSTEM_PORT
EXTRA_ARGS=""
if [[ "$SINGLE_GPU" == "true" ]]; then EXTRA_ARGS="--enforce-eager --max-model-len 16384"; fi
PD_GPU_MEM_ARGS=$(build_vllm_gpu_mem_args)
[[ -n "$PD_GPU_MEM_ARGS" ]] || PD_GPU_MEM_ARGS="--gpu-memory-utilization 0.7"
ENCODE_ENV
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT1:-8081} CUDA_VISIBLE_DEVICES=0 \
python -m dynamo.vllm --enable-multimodal --disaggregation-mode encode --model "$MODEL_NAME" \
  --gpu-memory-utilization 0.1 $EXTRA_ARGS &
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT2:-8082} CUDA_VISIBLE_DEVICES=0 \
python -m dynamo.vllm --route-to-encoder --enable-multimodal --enable-mm-embeds \
  --model "$MODEL_NAME" $PD_GPU_MEM_ARGS $EXTRA_ARGS "${EXTRA_PD_ARGS[@]}" &
wait_any_exit
"""

VLLM_P_D = r"""#!/bin/bash
# P/D multimodal: frontend, prefill worker, decode worker (upstream's shape: dyn_port).
set -e
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/gpu_utils.sh"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
WORKER_MODULE="dynamo.vllm"
MODEL_NAME="Qwen/Qwen3-VL-2B-Instruct"
SINGLE_GPU=false
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    --single-gpu) SINGLE_GPU=true; shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
trap dynamo_exit_trap EXIT
HTTP_PORT=${DYN_HTTP_PORT:-8000}
print_launch_banner --multimodal "Launching Disaggregated Multimodal P/D" "$MODEL_NAME" "$HTTP_PORT"
python -m dynamo.frontend &
EXTRA_ARGS=""
PD_EXTRA_ARGS=""
if [[ "$SINGLE_GPU" == "true" ]]; then
  EXTRA_ARGS="--enforce-eager"
  PD_EXTRA_ARGS="--max-model-len 4096"
fi
KV_TRANSFER='{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
kv_events() { echo "{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"; }
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 1 20098) \
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 1 8081) CUDA_VISIBLE_DEVICES=0 \
python -m "$WORKER_MODULE" --disaggregation-mode prefill --enable-multimodal --model $MODEL_NAME \
  --gpu-memory-utilization 0.45 $EXTRA_ARGS $PD_EXTRA_ARGS --kv-transfer-config "$KV_TRANSFER" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 1 20081)")" &
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 2 20099) \
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 2 8082) CUDA_VISIBLE_DEVICES=0 \
python -m "$WORKER_MODULE" --disaggregation-mode decode --enable-multimodal --enable-mm-embeds \
  --model $MODEL_NAME --gpu-memory-utilization 0.45 $EXTRA_ARGS $PD_EXTRA_ARGS \
  --kv-transfer-config "$KV_TRANSFER" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 2 20082)")" &
wait_any_exit
"""

SGLANG_E_PD = r"""#!/bin/bash
# E/PD multimodal on SGLang: frontend, PD worker, encode worker (upstream's shape: no embedding
# transfer mode, the PD worker started first, gated on its health on one GPU).
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/gpu_utils.sh"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
MODEL_NAME="Qwen/Qwen2.5-VL-7B-Instruct"
CHAT_TEMPLATE="qwen2-vl"
SINGLE_GPU=false
TRANSFER_BACKEND="${DYN_SGLANG_DISAGGREGATION_TRANSFER_BACKEND:-nixl}"
ENCODE_EXTRA_ARGS=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    --chat-template) CHAT_TEMPLATE=$2; shift 2 ;;
    --single-gpu) SINGLE_GPU=true; shift ;;
    --frontend-decoding) ENCODE_EXTRA_ARGS="$ENCODE_EXTRA_ARGS --frontend-decoding"; shift ;;
    --multimodal-embedding-cache-capacity-gb)
      ENCODE_EXTRA_ARGS="$ENCODE_EXTRA_ARGS --multimodal-embedding-cache-capacity-gb $2"; shift 2 ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
GPU_MEM_ARGS=$(build_sglang_gpu_mem_args)
WORKER_EXTRA_ARGS="$GPU_MEM_ARGS"
ENCODE_EXTRA_ARGS="$ENCODE_EXTRA_ARGS $GPU_MEM_ARGS"
unset DYN_SYSTEM_PORT
print_launch_banner --multimodal "Launching Multimodal E/PD" "$MODEL_NAME" "${DYN_HTTP_PORT:-8000}"
python3 -m dynamo.frontend &
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT2:-8082} \
python3 -m dynamo.sglang --enable-multimodal --dedicated-mm-encoder --disaggregation-mode pd \
  --model-path "$MODEL_NAME" --page-size 16 --tp 1 --trust-remote-code --skip-tokenizer-init \
  --disable-radix-cache --disaggregation-transfer-backend "$TRANSFER_BACKEND" $WORKER_EXTRA_ARGS &
WORKER_PID=$!
if [[ "$SINGLE_GPU" == "true" ]]; then
  rc=0
  wait_for_ready "http://localhost:${DYN_SYSTEM_PORT2:-8082}/health" 120 "$WORKER_PID" || rc=$?
  if [[ $rc == 2 ]]; then echo "PD worker exited"; wait_any_exit; fi
fi
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT1:-8081} \
python3 -m dynamo.sglang --enable-multimodal --disaggregation-mode encode \
  --model-path "$MODEL_NAME" --chat-template "$CHAT_TEMPLATE" --skip-tokenizer-init \
  $ENCODE_EXTRA_ARGS &
wait_any_exit
"""

HEALTH_LINE = "export DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='[\"generate\"]'  # encode: no payload"

# SGLang agg after upstream's rename (multimodal_agg.sh -> agg_vision.sh): `--model-path`, its own
# page size, `--frontend-decoding`, the one worker on the unindexed DYN_SYSTEM_PORT.
SGLANG_AGG_VISION = r"""#!/bin/bash
# Aggregated vision on SGLang: frontend + one worker that encodes images in-process.
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/gpu_utils.sh"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
MODEL="Qwen/Qwen3-VL-2B-Instruct"
PAGE_SIZE=16
EXTRA_ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model-path) MODEL=$2; shift 2 ;;
    --page-size) PAGE_SIZE=$2; shift 2 ;;
    --frontend-decoding) EXTRA_ARGS+=(--frontend-decoding); shift ;;
    --single-gpu) shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
print_launch_banner --multimodal "Aggregated Vision (SGLang)" "$MODEL" "${DYN_HTTP_PORT:-8000}"
python3 -m dynamo.frontend &
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT:-8081} \
python3 -m dynamo.sglang --model-path "$MODEL" --served-model-name "$MODEL" \
  --page-size "$PAGE_SIZE" --tp 1 --trust-remote-code --skip-tokenizer-init --enable-metrics \
  $(build_sglang_gpu_mem_args) "${EXTRA_ARGS[@]}" &
wait_any_exit
"""

# SGLang P/D on one GPU as upstream ships it: GPU memory options on both workers (memory saver,
# checkpoint deletion, a static memory fraction), the bootstrap port through dyn_port.
SGLANG_PD_SAME_GPU = r"""#!/bin/bash
# Disaggregated prefill/decode on SGLang, both on one GPU.
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
MODEL="Qwen/Qwen3-0.6B"
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL=$2; shift 2 ;;
    --single-gpu) shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
BOOTSTRAP=$(dyn_port DYN_SGLANG_BOOTSTRAP_PORT 1 12345)
python3 -m dynamo.frontend &
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 1 8081) \
python3 -m dynamo.sglang --model-path "$MODEL" --served-model-name "$MODEL" --page-size 16 --tp 1 \
  --trust-remote-code --disaggregation-mode prefill --disaggregation-bootstrap-port "$BOOTSTRAP" \
  --disaggregation-transfer-backend nixl --mem-fraction-static 0.4 --enable-memory-saver \
  --delete-ckpt-after-loading --enable-metrics &
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 2 8082) \
python3 -m dynamo.sglang --model-path "$MODEL" --served-model-name "$MODEL" --page-size 16 --tp 1 \
  --trust-remote-code --disaggregation-mode decode --disaggregation-bootstrap-port "$BOOTSTRAP" \
  --disaggregation-transfer-backend nixl --mem-fraction-static 0.4 --enable-memory-saver \
  --delete-ckpt-after-loading --enable-metrics &
wait_any_exit
"""

# Upstream main's SGLang E/P/D: `unset DYN_SYSTEM_PORT`, encode and prefill on DYN_SYSTEM_PORT1/2,
# the decode worker started with no system port at all (nothing can poll its health).
SGLANG_EPD_NO_DECODE_PORT = r"""#!/bin/bash
# E/P/D multimodal on SGLang: frontend, encode, prefill, decode.
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
MODEL="Qwen/Qwen2.5-VL-7B-Instruct"
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL=$2; shift 2 ;;
    --single-gpu) shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
ENGINE="--page-size 16 --tp-size 1 --trust-remote-code --skip-tokenizer-init"
unset DYN_SYSTEM_PORT
python3 -m dynamo.frontend &
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT1:-8081} \
python3 -m dynamo.sglang --model-path "$MODEL" --enable-multimodal --disaggregation-mode encode \
  --chat-template qwen2-vl --skip-tokenizer-init &
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT2:-8082} \
python3 -m dynamo.sglang --model-path "$MODEL" --enable-multimodal --dedicated-mm-encoder \
  --disaggregation-mode prefill $ENGINE --disable-radix-cache \
  --disaggregation-transfer-backend nixl \
  --disaggregation-bootstrap-port "$(dyn_port DYN_SGLANG_BOOTSTRAP_PORT 1 12345)" &
python3 -m dynamo.sglang --model-path "$MODEL" --enable-multimodal --dedicated-mm-encoder \
  --disaggregation-mode decode $ENGINE --disaggregation-transfer-backend nixl &
wait_any_exit
"""

# Upstream's XPU E/P/D (xpu/disagg_multimodal_epd_xpu.sh) in its newer shape: DEVICE_PLATFORM
# chooses the affinity variable (ZE_AFFINITY_MASK on xpu) and kv_buffer_device, XPU adds
# `--block-size 64 --enforce-eager`, ports per role; its encode worker has no health source
# unless `health_source` (every upstream version reached ships it without).
XPU_EPD = r"""#!/bin/bash
# E/P/D multimodal on Intel XPU (or CUDA): frontend, encode, prefill, decode.
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../../common/launch_utils.sh"
MODEL_NAME="llava-hf/llava-1.5-7b-hf"
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    --single-gpu) shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
DEVICE_PLATFORM="${DEVICE_PLATFORM:-xpu}"
AFFINITY=CUDA_VISIBLE_DEVICES
if [[ "${DEVICE_PLATFORM,,}" == "xpu" ]]; then AFFINITY=ZE_AFFINITY_MASK; fi
EXTRA_ARGS=""
if [[ "${DEVICE_PLATFORM,,}" == "xpu" ]]; then EXTRA_ARGS="--block-size 64 --enforce-eager"; fi
KV="{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\",\"kv_buffer_device\":\"$DEVICE_PLATFORM\"}"
kv_events() { echo "{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"; }
python -m dynamo.frontend &
ENCODE_ENV
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 1 8081) \
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 1 20097) \
env $AFFINITY=0 python -m dynamo.vllm --enable-multimodal --disaggregation-mode encode \
  --model $MODEL_NAME --gpu-memory-utilization 0.9 $EXTRA_ARGS --kv-transfer-config "$KV" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 1 20080)")" &
unset DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 2 8082) \
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 2 20098) \
env $AFFINITY=1 python -m dynamo.vllm --route-to-encoder --disaggregation-mode prefill \
  --enable-multimodal --enable-mm-embeds --model $MODEL_NAME --gpu-memory-utilization 0.9 \
  $EXTRA_ARGS --max-model-len 10240 --kv-transfer-config "$KV" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 2 20081)")" &
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 3 8083) \
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 3 20099) \
env $AFFINITY=2 python -m dynamo.vllm --disaggregation-mode decode --enable-multimodal \
  --enable-mm-embeds --model $MODEL_NAME --gpu-memory-utilization 0.9 $EXTRA_ARGS \
  --max-model-len 10240 --kv-transfer-config "$KV" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 3 20082)")" &
wait_any_exit
"""


def xpu_epd(health_source: bool) -> str:
    """Upstream's XPU E/P/D shape, its encode worker with the health line or (as it ships)
    without."""
    line = HEALTH_LINE if health_source else "# (the encode worker: no health source)"
    return XPU_EPD.replace("ENCODE_ENV", line)


# Upstream's XPU agg (xpu/agg_multimodal_xpu.sh): the one worker on DYN_SYSTEM_PORT, its device by
# ZE_AFFINITY_MASK, XPU's block size and eager mode.
XPU_AGG = r"""#!/bin/bash
# Aggregated multimodal on Intel XPU: frontend + one worker.
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../../common/launch_utils.sh"
MODEL_NAME="Qwen/Qwen3-VL-2B-Instruct"
EXTRA_ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    *) EXTRA_ARGS+=("$1"); shift ;;
  esac
done
python -m dynamo.frontend &
ZE_AFFINITY_MASK=0 DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT:-8081} \
python -m dynamo.vllm --enable-multimodal --model "$MODEL_NAME" --block-size 64 --enforce-eager \
  --max-model-len 10240 --gpu-memory-utilization 0.9 "${EXTRA_ARGS[@]}" &
wait_any_exit
"""

XPU_AGG_PATH = "examples/backends/vllm/launch/xpu/agg_multimodal_xpu.sh"
# Upstream's XPU router (xpu/agg_multimodal_router_xpu.sh): the CUDA router's loop with each
# worker's device by ZE_AFFINITY_MASK. Its blocks stay 16 tokens (BLOCK_SIZE's default, as the
# matrix's `extra_vllm_args=["--block-size", "16"]` gives the workers; read on upstream main
# 0c7751b, 2026-12-06): 64 is the XPU E/P/D launcher's, not this one's.
XPU_ROUTER = VLLM_ROUTER.replace('"CUDA_VISIBLE_DEVICES=${GPU_ID}"', '"ZE_AFFINITY_MASK=${GPU_ID}"')
# one directory deeper (launch/xpu/): its helpers and the checkout's root one more level up
XPU_ROUTER = XPU_ROUTER.replace("${SCRIPT_DIR}/../../../", "${SCRIPT_DIR}/../../../../")
XPU_ROUTER_PATH = "examples/backends/vllm/launch/xpu/agg_multimodal_router_xpu.sh"

# A checkout's launchers as upstream names them today, by path (the matrix's scripts).
SGLANG_AGG_PATH = "examples/backends/sglang/launch/agg_vision.sh"
XPU_EPD_PATH = "examples/backends/vllm/launch/xpu/disagg_multimodal_epd_xpu.sh"
MATRIX_LAUNCHERS = {
    SGLANG_AGG_PATH: SGLANG_AGG_VISION,
    "examples/backends/sglang/launch/disagg_same_gpu.sh": SGLANG_PD_SAME_GPU,
    "examples/backends/sglang/launch/multimodal_disagg.sh": SGLANG_EPD_NO_DECODE_PORT,
    XPU_EPD_PATH: xpu_epd(health_source=False),
    XPU_AGG_PATH: XPU_AGG,
    XPU_ROUTER_PATH: XPU_ROUTER,
}


def vllm_e_pd(health_source: bool = True) -> str:
    """Upstream's E/PD shape, its encode worker with the seed's health line or (as upstream ships
    it) without; the line is exported before the encode worker and unset after it."""
    line = f"{HEALTH_LINE}\n" if health_source else "# (the encode worker: no health source)\n"
    text = VLLM_E_PD.replace("ENCODE_ENV\n", line)
    if health_source:
        encode_end = "  --gpu-memory-utilization 0.1 $EXTRA_ARGS &\n"
        text = text.replace(
            encode_end, encode_end + "unset DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS\n"
        )
    return text


# Each shape at the path upstream keeps it, for the profile whose `upstream_launcher` it is.
LAUNCHERS = {
    "examples/backends/vllm/launch/agg_multimodal.sh": AGG,
    "examples/backends/vllm/launch/agg_multimodal_router.sh": VLLM_ROUTER,
    "examples/backends/vllm/launch/disagg_multimodal_e_pd.sh": vllm_e_pd(),
    "examples/backends/vllm/launch/disagg_multimodal_p_d.sh": VLLM_P_D,
    "examples/backends/sglang/launch/multimodal_epd.sh": SGLANG_E_PD,
    "examples/backends/sglang/launch/agg_multimodal_router.sh": SGLANG_ROUTER,
}
