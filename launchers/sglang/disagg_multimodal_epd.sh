#!/usr/bin/env bash
# E/P/D on SGLang: frontend + encode worker (frontend-facing) + prefill + decode workers, KV over
# SGLang's NIXL backend (on the CPU tier over host memory: UCX on lo).
# Usage: disagg_multimodal_epd.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend
CHAT_TEMPLATE=${SGLANG_CHAT_TEMPLATE:-qwen2-vl}
ENGINE=(--page-size 16 --tp-size 1 --trust-remote-code --skip-tokenizer-init)
# Only prefill runs the bootstrap server (on --host, default 127.0.0.1); decode learns host
# (SGLANG_HOST_IP), port and room from each prefill response, so it gets no bootstrap port.
BOOTSTRAP_PORT=$(port SGLANG_BOOTSTRAP_PORT 12345)

# No health-check payload, but it sets system health itself once its model is registered
# (dynamo/sglang/init_multimodal.py: runtime.set_health_status(True)); /health 200 = servable.
DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role encode python3 -m dynamo.sglang --model-path "$MODEL" \
  --enable-multimodal --disaggregation-mode encode \
  --chat-template "$CHAT_TEMPLATE" --skip-tokenizer-init "${FRONTEND_DECODING[@]}"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role prefill python3 -m dynamo.sglang --model-path "$MODEL" \
  --enable-multimodal --dedicated-mm-encoder \
  --disaggregation-mode prefill "${ENGINE[@]}" --disable-radix-cache \
  --disaggregation-transfer-backend nixl --disaggregation-bootstrap-port "$BOOTSTRAP_PORT" \
  --nccl-port "$(port SGLANG_NCCL_PORT2 29502)" $(sglang_engine_args "$LAYOUT" 0.8)

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT3 8083) CUDA_VISIBLE_DEVICES=$(gpu_for 2) \
  start_role decode python3 -m dynamo.sglang --model-path "$MODEL" \
  --enable-multimodal --dedicated-mm-encoder \
  --disaggregation-mode decode "${ENGINE[@]}" --disaggregation-transfer-backend nixl \
  --nccl-port "$(port SGLANG_NCCL_PORT3 29503)" $(sglang_engine_args "$LAYOUT" 0.8)

wait_any_exit
