#!/usr/bin/env bash
# Multimodal KV router: the frontend routes by KV-cache overlap (--router-mode kv) over two
# aggregated workers, each publishing its KV cache events. Upstream:
# examples/backends/vllm/launch/agg_multimodal_router.sh (SINGLE_GPU=true there is --single-gpu).
# Usage: agg_multimodal_router.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
BLOCK=$(kv_block_size)
FRONTEND_ARGS=(--router-mode kv --kv-cache-block-size "$BLOCK")
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# kv_events PORT: where a worker publishes its KV cache events (loopback, leased).
kv_events() {
  echo "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://127.0.0.1:$1\"}"
}

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role worker1 "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --enable-multimodal --block-size "$BLOCK" \
  $(engine_args "$LAYOUT" worker1 0.2) "${FRONTEND_DECODING[@]}" \
  --kv-events-config "$(kv_events "$(port KV_EVENTS_PORT1 20081)")"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role worker2 "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --enable-multimodal --block-size "$BLOCK" \
  $(engine_args "$LAYOUT" worker2 0.2) "${FRONTEND_DECODING[@]}" \
  --kv-events-config "$(kv_events "$(port KV_EVENTS_PORT2 20082)")"

wait_any_exit
