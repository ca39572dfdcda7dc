#!/usr/bin/env bash
# Multimodal KV router on SGLang: the frontend routes by KV-cache overlap (--router-mode kv) over
# two aggregated dynamo.sglang workers that decode media in the frontend and publish their KV
# events. On CPU: the role adapter (the CPU tier's SGLang venv).
# Upstream: examples/backends/sglang/launch/
# agg_multimodal_router.sh (michaelfeil/dynamo 5a47eb63; SINGLE_GPU=true there is --single-gpu).
# Usage: agg_multimodal_router.sh [--single-gpu]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

FRONTEND_ARGS=(--router-mode kv --kv-cache-block-size 16)
begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# kv_events PORT: upstream's wildcard endpoint. It is the only one that works here: SGLang's
# publisher binds only a wildcard (or ipc://) endpoint and connects to any other, and
# dynamo.sglang's reader accepts only tcp:// (dynamo/sglang/publisher.py format_zmq_endpoint), so
# this socket listens on every interface (the profile's not_loopback says so).
kv_events() {
  echo "{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"
}

router_worker() {
  local role=$1 system_port=$2 nccl_port=$3 events_port=$4 device=$5
  DYN_SYSTEM_PORT=$system_port CUDA_VISIBLE_DEVICES=$(gpu_for "$device") \
    start_role "$role" python3 -m dynamo.sglang --model-path "$MODEL" \
    --frontend-decoding --page-size 16 --tp-size 1 \
    --trust-remote-code --enable-metrics --disable-piecewise-cuda-graph \
    --nccl-port "$nccl_port" --kv-events-config "$(kv_events "$events_port")" \
    $(sglang_engine_args "$LAYOUT" 0.4)
}

router_worker worker1 "$(port DYN_SYSTEM_PORT1 8081)" "$(port SGLANG_NCCL_PORT1 29501)" \
  "$(port KV_EVENTS_PORT1 20081)" 0
router_worker worker2 "$(port DYN_SYSTEM_PORT2 8082)" "$(port SGLANG_NCCL_PORT2 29502)" \
  "$(port KV_EVENTS_PORT2 20082)" 1

wait_any_exit
