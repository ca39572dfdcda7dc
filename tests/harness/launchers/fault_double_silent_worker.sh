#!/usr/bin/env bash
# TEST DOUBLE: a real Dynamo frontend + a "worker" that is a plain `sleep infinity`: it runs but
# never opens its health port and never registers (a hung engine start). No real component hangs
# like this on demand, hence the double.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../launchers/lib/common.sh"

start_event_broker
start_role frontend "$PYTHON" -m dynamo.frontend --http-host 127.0.0.1 \
  --http-port "$(port DYN_HTTP_PORT 8000)"
: "$(port DYN_SYSTEM_PORT1 8081)"  # leased for the worker, which never opens it
start_role worker sleep infinity
wait_any_exit
