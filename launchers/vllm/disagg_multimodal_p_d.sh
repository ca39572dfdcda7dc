#!/usr/bin/env bash
# P/D: frontend + prefill worker (decodes and encodes media itself: no encode worker) + decode
# worker, KV over NIXL. Upstream: examples/backends/vllm/launch/disagg_multimodal_p_d.sh.
# Usage: disagg_multimodal_p_d.sh [--single-gpu]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend
((${#FRONTEND_DECODING[@]} == 0)) || die "--frontend-decoding: upstream's P/D takes none"
# Single GPU, as upstream: one image per prompt and no video, so the profile run stays small.
LIMITS=()
[[ $LAYOUT == single-gpu ]] && LIMITS=(--limit-mm-per-prompt '{"image":1,"video":0,"audio":0}')

VLLM_NIXL_SIDE_CHANNEL_PORT=$(port NIXL_SIDE_CHANNEL_PORT1 20098) \
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role prefill "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --disaggregation-mode prefill --enable-multimodal \
  $(engine_args "$LAYOUT" prefill 0.45) "${LIMITS[@]}" $(kv_transfer_args)

VLLM_NIXL_SIDE_CHANNEL_PORT=$(port NIXL_SIDE_CHANNEL_PORT2 20099) \
  DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role decode "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --disaggregation-mode decode --enable-multimodal \
  --enable-mm-embeds $(engine_args "$LAYOUT" decode 0.45) "${LIMITS[@]}" $(kv_transfer_args)

wait_any_exit
