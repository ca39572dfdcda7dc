#!/usr/bin/env bash
# E/PD: frontend + encode worker + one prefill-decode worker that routes media to the encoder.
# Usage: disagg_multimodal_e_pd.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# The encode worker registers no health-check payload: without this its /health is 503 forever.
DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]' \
  start_vllm_encode_worker

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role pd "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --route-to-encoder --enable-mm-embeds \
  --enable-multimodal $(engine_args "$LAYOUT" pd 0.7) $(embedding_transfer_args) \
  "${FRONTEND_DECODING[@]}"

wait_any_exit
