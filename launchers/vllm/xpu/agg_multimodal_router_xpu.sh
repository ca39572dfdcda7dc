#!/usr/bin/env bash
# Multimodal KV router on Intel XPU: the same topology as ../agg_multimodal_router.sh (two
# aggregated workers behind the frontend's KV-aware router), each worker's device given by
# ZE_AFFINITY_MASK (the role adapter, harness/launch/role_adapter.py). Upstream:
# examples/backends/vllm/launch/xpu/agg_multimodal_router_xpu.sh.
# Usage: agg_multimodal_router_xpu.sh [--model ID] [--single-gpu] [--frontend-decoding]
set -euo pipefail
# the CPU tier stays the CPU tier (the audit runs every tier a profile has)
[[ ${HARNESS_DEVICE:-} == cpu ]] || export HARNESS_DEVICE=xpu
exec bash "$(dirname "${BASH_SOURCE[0]}")/../agg_multimodal_router.sh" "$@"
