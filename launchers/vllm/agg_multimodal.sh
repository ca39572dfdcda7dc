#!/usr/bin/env bash
# Aggregated multimodal: frontend + one dynamo.vllm worker that encodes, prefills and decodes.
# Usage: agg_multimodal.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role worker "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --enable-multimodal \
  $(engine_args "$LAYOUT" worker 0.85) "${FRONTEND_DECODING[@]}"

wait_any_exit
