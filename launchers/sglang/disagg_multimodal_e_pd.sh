#!/usr/bin/env bash
# E/PD on SGLang: frontend + encode worker (the frontend-facing one: it registers the model and
# forwards embeddings) + one internal prefill-decode worker. On CPU: the role adapter (SGLang venv).
# Usage: disagg_multimodal_e_pd.sh [--single-gpu] [--frontend-decoding]
#        [--multimodal-embedding-cache-capacity-gb GB]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend
CHAT_TEMPLATE=${SGLANG_CHAT_TEMPLATE:-qwen2-vl}
# As upstream multimodal_epd.sh: nixl-read next to SGLang's NIXL backend; the frontend-decoding
# variant runs with local transfer upstream (multimodal_e_pd_fd_qwen).
EMBEDDING_MODE=nixl-read
((${#FRONTEND_DECODING[@]})) && EMBEDDING_MODE=local

# No health-check payload, but it sets system health itself once its model is registered
# (dynamo/sglang/init_multimodal.py: runtime.set_health_status(True)); /health 200 = servable.
# --frontend-decoding goes to this worker only (Dynamo rejects it on --dedicated-mm-encoder).
DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role encode python3 -m dynamo.sglang --model-path "$MODEL" \
  --enable-multimodal --disaggregation-mode encode \
  --chat-template "$CHAT_TEMPLATE" --skip-tokenizer-init \
  --embedding-transfer-mode "$EMBEDDING_MODE" "${FRONTEND_DECODING[@]}" "${MM_EMBEDDING_CACHE[@]}"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role pd python3 -m dynamo.sglang --model-path "$MODEL" \
  --enable-multimodal --dedicated-mm-encoder \
  --disaggregation-mode pd --page-size 16 --tp-size 1 --trust-remote-code \
  --skip-tokenizer-init --disable-radix-cache --disaggregation-transfer-backend nixl \
  --embedding-transfer-mode "$EMBEDDING_MODE" --nccl-port "$(port SGLANG_NCCL_PORT2 29502)" \
  $(sglang_engine_args "$LAYOUT" 0.8)

wait_any_exit
