#!/usr/bin/env bash
# Multimodal KV router: the frontend routes by KV-cache overlap (--router-mode kv) over two
# aggregated workers, each publishing its KV cache events. Upstream:
# examples/backends/vllm/launch/agg_multimodal_router.sh (SINGLE_GPU=true there is --single-gpu).
# Usage: agg_multimodal_router.sh [--model ID] [--single-gpu] [--frontend-decoding]
# VLLM_EXTRA_ARGS: more engine flags for both workers (upstream's variable of the same name).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
BLOCK=16  # vLLM's CUDA default, which workers and the KV-aware router must agree on
FRONTEND_ARGS=(--router-mode kv --kv-cache-block-size "$BLOCK")
begin_topology "$@"  # --model and layout flags, event broker, frontend

MEM=(--gpu-memory-utilization 0.2)
[[ $LAYOUT == single-gpu ]] && MEM=(--enforce-eager --gpu-memory-utilization 0.2 --max-model-len 4096)
kv_events() {
  echo "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"
}

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role worker1 python3 -m dynamo.vllm --model "$MODEL" --enable-multimodal \
  --block-size "$BLOCK" "${MEM[@]}" "${FRONTEND_DECODING[@]}" ${VLLM_EXTRA_ARGS:-} \
  --kv-events-config "$(kv_events "$(port VLLM_ZMQ_PORT_WORKER1 20081)")"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role worker2 python3 -m dynamo.vllm --model "$MODEL" --enable-multimodal \
  --block-size "$BLOCK" "${MEM[@]}" "${FRONTEND_DECODING[@]}" ${VLLM_EXTRA_ARGS:-} \
  --kv-events-config "$(kv_events "$(port VLLM_ZMQ_PORT_WORKER2 20082)")"

wait_any_exit
