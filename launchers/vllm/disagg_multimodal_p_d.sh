#!/usr/bin/env bash
# P/D: frontend + prefill worker (decodes and encodes media itself: no encode worker) + decode
# worker, KV over NIXL. Upstream: examples/backends/vllm/launch/disagg_multimodal_p_d.sh.
# Usage: disagg_multimodal_p_d.sh [--model ID] [--single-gpu]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
begin_topology "$@"  # --model and layout flags, event broker, frontend
((${#FRONTEND_DECODING[@]} == 0)) || die "--frontend-decoding: upstream's P/D takes none"

MEM=0.9 EXTRA=()
# Single GPU, as upstream: one image per prompt and no video, so the profile run stays small.
if [[ $LAYOUT == single-gpu ]]; then
  MEM=0.45
  EXTRA=(--enforce-eager --max-model-len 4096 --limit-mm-per-prompt '{"image":1,"video":0,"audio":0}')
fi

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) \
  VLLM_NIXL_SIDE_CHANNEL_PORT=$(port VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL 20098) \
  CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role prefill python3 -m dynamo.vllm --disaggregation-mode prefill --enable-multimodal \
  --model "$MODEL" --gpu-memory-utilization "$MEM" "${EXTRA[@]}" \
  --kv-transfer-config "$KV_TRANSFER_CONFIG"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) \
  VLLM_NIXL_SIDE_CHANNEL_PORT=$(port VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE 20099) \
  CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role decode python3 -m dynamo.vllm --disaggregation-mode decode --enable-multimodal \
  --enable-mm-embeds --model "$MODEL" --gpu-memory-utilization "$MEM" "${EXTRA[@]}" \
  --kv-transfer-config "$KV_TRANSFER_CONFIG"

wait_any_exit
