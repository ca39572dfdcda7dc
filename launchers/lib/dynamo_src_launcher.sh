#!/usr/bin/env bash
# Runs a Dynamo checkout's own launcher, unmodified, under the harness's contract.
# Usage: dynamo_src_launcher.sh SCRIPT [ARGS...]   (SCRIPT: a launcher inside $HARNESS_DYNAMO_SRC)
# - the event plane through a loopback broker (Dynamo's PUB sockets bind 0.0.0.0 otherwise);
# - `python` / `python3` resolve to the role adapter (role_adapter_bin/, role_adapter.py), as for
#   our launchers, which here also writes each role's pid file and log (start_role's job in ours);
# - the script runs as a child: its own `trap 'kill 0' EXIT` takes its roles down with it, and
#   the harness, which started this in its own session, stops and verifies everything it left.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
script=${1:?usage: dynamo_src_launcher.sh SCRIPT [ARGS...]}
shift
[[ -f $script ]] || die "no launcher $script in the Dynamo checkout"
start_event_broker
export HARNESS_ADAPTER_CONTRACT=1
code=0
bash "$script" "$@" || code=$?
echo "launcher: $(basename "$script") exited with code $code" >&2
exit "$code"
