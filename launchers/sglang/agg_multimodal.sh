#!/usr/bin/env bash
# Aggregated multimodal on SGLang: frontend + one dynamo.sglang worker that encodes images
# in-process, prefills and decodes. On CPU: the role adapter (the CPU tier's SGLang venv).
# Usage: agg_multimodal.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# Registers SglangHealthCheckPayload (init_llm.init_decode): /health follows the canary.
DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role worker python3 -m dynamo.sglang --model-path "$MODEL" \
  --page-size 16 --tp-size 1 --trust-remote-code \
  --skip-tokenizer-init --nccl-port "$(port SGLANG_NCCL_PORT1 29501)" \
  $(sglang_engine_args "$LAYOUT" 0.85) "${FRONTEND_DECODING[@]}"

wait_any_exit
