#!/usr/bin/env bash
# E/P/D: frontend + encode worker + prefill worker + decode worker (KV over NIXL).
# Upstream: examples/backends/vllm/launch/disagg_multimodal_epd.sh, its port variables included.
# Usage: disagg_multimodal_epd.sh [--model ID] [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # --model and layout flags, event broker, frontend

ENCODE_MEM=0.9 PREFILL_MEM=0.9 DECODE_MEM=0.9 EXTRA=()
if [[ $LAYOUT == single-gpu ]]; then
  ENCODE_MEM=0.1 PREFILL_MEM=0.4 DECODE_MEM=0.4 EXTRA=(--enforce-eager)
fi
PD_EXTRA=()
[[ $LAYOUT == single-gpu ]] && PD_EXTRA=(--max-model-len 4096)

# The encode worker registers no health-check payload: without this its /health is 503 forever.
DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]' \
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) \
  VLLM_NIXL_SIDE_CHANNEL_PORT=$(port VLLM_NIXL_SIDE_CHANNEL_PORT_ENCODE 20097) \
  CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role encode python3 -m dynamo.vllm --enable-multimodal --disaggregation-mode encode \
  --model "$MODEL" --gpu-memory-utilization "$ENCODE_MEM" "${EXTRA[@]}" "${FRONTEND_DECODING[@]}" \
  --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_events_config "$(port VLLM_ZMQ_PORT_ENCODE 20080)")"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) \
  VLLM_NIXL_SIDE_CHANNEL_PORT=$(port VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL 20098) \
  CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role prefill python3 -m dynamo.vllm --route-to-encoder --disaggregation-mode prefill \
  --enable-multimodal --enable-mm-embeds --model "$MODEL" --gpu-memory-utilization "$PREFILL_MEM" \
  "${EXTRA[@]}" "${PD_EXTRA[@]}" "${FRONTEND_DECODING[@]}" \
  --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_events_config "$(port VLLM_ZMQ_PORT_PREFILL 20081)")"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT3 8083) \
  VLLM_NIXL_SIDE_CHANNEL_PORT=$(port VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE 20099) \
  CUDA_VISIBLE_DEVICES=$(gpu_for 2) \
  start_role decode python3 -m dynamo.vllm --disaggregation-mode decode --enable-multimodal \
  --enable-mm-embeds --model "$MODEL" --gpu-memory-utilization "$DECODE_MEM" \
  "${EXTRA[@]}" "${PD_EXTRA[@]}" "${FRONTEND_DECODING[@]}" \
  --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_events_config "$(port VLLM_ZMQ_PORT_DECODE 20082)")"

wait_any_exit
