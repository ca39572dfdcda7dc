#!/usr/bin/env bash
# Multimodal KV router: the frontend routes by KV-cache overlap (--router-mode kv) over two
# aggregated workers, each publishing its KV cache events. Upstream:
# examples/backends/vllm/launch/agg_multimodal_router.sh (SINGLE_GPU=true there is --single-gpu).
# Usage: agg_multimodal_router.sh [--single-gpu] [--frontend-decoding]
# VLLM_EXTRA_ARGS: more engine flags for both workers (upstream's variable of the same name).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
BLOCK=$(kv_block_size)
FRONTEND_ARGS=(--router-mode kv --kv-cache-block-size "$BLOCK")
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# kv_events NAME: where a worker publishes its KV cache events. vLLM 0.31's ZmqEventPublisher
# binds only a wildcard or ipc:// endpoint and *connects* to any other (kv_events.py
# _is_bind_endpoint), and dynamo.vllm connects its reader to the same endpoint (main.py, "*"
# replaced by 127.0.0.1): with tcp://127.0.0.1:PORT both sides connected, no event ever flowed
# and the KV router routed blind (router_kv_hit_rate 0, repeats missing the prefix cache).
# Upstream's tcp://*:PORT binds every interface; an ipc:// socket in the topology's scratch
# directory is bound by vLLM and listens on no network at all.
kv_events() {
  echo "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"ipc://${TMPDIR:-/tmp}/kv-events-$1\"}"
}

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) CUDA_VISIBLE_DEVICES=$(gpu_for 0) \
  start_role worker1 "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --enable-multimodal --block-size "$BLOCK" \
  $(engine_args "$LAYOUT" worker1 0.2) "${FRONTEND_DECODING[@]}" ${VLLM_EXTRA_ARGS:-} \
  --kv-events-config "$(kv_events worker1)"

DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) CUDA_VISIBLE_DEVICES=$(gpu_for 1) \
  start_role worker2 "$PYTHON" -m dynamo.vllm --model "$MODEL" \
  --served-model-name "$SERVED_MODEL_NAME" --enable-multimodal --block-size "$BLOCK" \
  $(engine_args "$LAYOUT" worker2 0.2) "${FRONTEND_DECODING[@]}" ${VLLM_EXTRA_ARGS:-} \
  --kv-events-config "$(kv_events worker2)"

wait_any_exit
