#!/usr/bin/env bash
# Multimodal prefill + decode on SGLang with no encode worker: each engine encodes its own images;
# the prefill worker hands the KV cache to the decode worker over NIXL (SGLang's disaggregation
# bootstrap); on the CPU tier NIXL over host memory (UCX on lo).
# Upstream: examples/backends/sglang/launch/
# disagg_same_gpu.sh (michaelfeil/dynamo b37890b6), both workers on one GPU.
# Usage: disagg_same_gpu.sh [--single-gpu]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

begin_topology "$@"  # layout flags, MODEL defaults, event broker, frontend

# disagg_worker ROLE SYSTEM_PORT NCCL_PORT DEVICE [FLAGS...]: --host is where a worker serves
# (upstream 0.0.0.0; loopback here). Only the prefill worker serves the disaggregation bootstrap:
# it publishes its address through discovery (dynamo/sglang/register.py), where the decode worker
# finds it, so upstream's passing the same --disaggregation-bootstrap-port to decode is not kept.
disagg_worker() {
  local role=$1 system_port=$2 nccl_port=$3 device=$4
  shift 4
  DYN_SYSTEM_PORT=$system_port CUDA_VISIBLE_DEVICES=$(gpu_for "$device") \
    start_role "$role" python3 -m dynamo.sglang --enable-multimodal --model-path "$MODEL" \
    --page-size 16 --tp-size 1 --trust-remote-code \
    --disaggregation-mode "$role" --host 127.0.0.1 --disaggregation-transfer-backend nixl \
    --enable-metrics --nccl-port "$nccl_port" $(sglang_engine_args "$LAYOUT" 0.4) "$@"
}

disagg_worker prefill "$(port DYN_SYSTEM_PORT1 8081)" "$(port SGLANG_NCCL_PORT1 29501)" 0 \
  --disaggregation-bootstrap-port "$(port SGLANG_BOOTSTRAP_PORT 12345)"
disagg_worker decode "$(port DYN_SYSTEM_PORT2 8082)" "$(port SGLANG_NCCL_PORT2 29502)" 1

wait_any_exit
