#!/usr/bin/env bash
# E/P/D: frontend + encode worker + prefill worker + decode worker (KV over NIXL).
# Usage: disagg_multimodal_epd.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# The encode worker registers no health-check payload: without this its /health is 503 forever.
DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]' \
  start_vllm_encode_worker

VLLM_NIXL_SIDE_CHANNEL_PORT=$(port NIXL_SIDE_CHANNEL_PORT1 20097) \
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role prefill "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --disaggregation-mode prefill --route-to-encoder \
  --enable-mm-embeds --enable-multimodal $(engine_args "$LAYOUT" prefill 0.4) \
  $(embedding_transfer_args) $(kv_transfer_args) "${FRONTEND_DECODING[@]}"

VLLM_NIXL_SIDE_CHANNEL_PORT=$(port NIXL_SIDE_CHANNEL_PORT2 20098) \
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT3 8083) CUDA_VISIBLE_DEVICES=$(gpu_for 2) \
  start_role decode "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --disaggregation-mode decode --enable-multimodal \
  $(engine_args "$LAYOUT" decode 0.4) $(kv_transfer_args) "${FRONTEND_DECODING[@]}"

wait_any_exit
