#!/usr/bin/env bash
# Aggregated multimodal: frontend + one dynamo.vllm worker that encodes, prefills and decodes.
# Upstream: examples/backends/vllm/launch/agg_multimodal.sh.
# Usage: agg_multimodal.sh [--model ID] [--single-gpu] [--frontend-decoding] [WORKER ARGS...]
# Other arguments go to the worker, as upstream's launcher forwards them (Gemma-4: --dtype).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
WORKER_ARGS_ACCEPTED=1
begin_topology "$@"  # --model and layout flags, event broker, frontend

MEM=(--gpu-memory-utilization 0.85)
[[ $LAYOUT == single-gpu ]] && MEM=(--enforce-eager --gpu-memory-utilization 0.85 --max-model-len 4096)

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role worker python3 -m dynamo.vllm --model "$MODEL" --enable-multimodal "${MEM[@]}" \
  "${FRONTEND_DECODING[@]}" "${MM_EMBEDDING_CACHE[@]}" "${WORKER_ARGS[@]}"

wait_any_exit
