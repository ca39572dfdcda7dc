#!/usr/bin/env bash
# E/P/D on Intel XPU: the same topology as ../disagg_multimodal_epd.sh (frontend + encode +
# prefill + decode, KV over NIXL with XPU buffers), with each role's device given by
# ZE_AFFINITY_MASK (the role adapter, harness/launch/role_adapter.py). Upstream's xpu/disagg_multimodal_epd_xpu.sh starts
# its encode worker without a health source (/health 503 forever); this one has the fix, since it
# runs the shared E/P/D launcher, whose encode role sets DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS.
# Usage: disagg_multimodal_epd_xpu.sh [--single-gpu] [--frontend-decoding]
set -euo pipefail
# the CPU tier stays the CPU tier (the audit runs every tier a profile has)
[[ ${HARNESS_DEVICE:-} == cpu ]] || export HARNESS_DEVICE=xpu
exec bash "$(dirname "${BASH_SOURCE[0]}")/../disagg_multimodal_epd.sh" "$@"
