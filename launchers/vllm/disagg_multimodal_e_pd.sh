#!/usr/bin/env bash
# E/PD: frontend + encode worker + one prefill-decode worker that routes media to the encoder.
# Upstream: examples/backends/vllm/launch/disagg_multimodal_e_pd.sh.
# Usage: disagg_multimodal_e_pd.sh [--model ID] [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # --model and layout flags, event broker, frontend

ENCODE_MEM=0.9 PD_MEM=0.9 EXTRA=()
[[ $LAYOUT == single-gpu ]] && ENCODE_MEM=0.1 PD_MEM=0.7 EXTRA=(--enforce-eager --max-model-len 4096)

# The encode worker registers no health-check payload: without this its /health is 503 forever.
DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]' \
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role encode python3 -m dynamo.vllm --enable-multimodal --disaggregation-mode encode \
  --model "$MODEL" --gpu-memory-utilization "$ENCODE_MEM" "${EXTRA[@]}" "${FRONTEND_DECODING[@]}"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role pd python3 -m dynamo.vllm --route-to-encoder --enable-multimodal --enable-mm-embeds \
  --model "$MODEL" --gpu-memory-utilization "$PD_MEM" "${EXTRA[@]}" "${FRONTEND_DECODING[@]}"

wait_any_exit
