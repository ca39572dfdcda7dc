#!/usr/bin/env bash
# Bring up a throwaway Docker daemon and a tiny local image for the harness's docker tests.
#
# Usage (Debian, as root):  .ci/docker_setup.sh start | stop | status
#   start: install docker.io and busybox-static if missing, start dockerd in the background
#          (overlay2 storage where the kernel mounts overlayfs here, else vfs; no bridge, no
#          iptables: works in a plain VM or a privileged sandbox),
#          wait until it answers, and import serve-harness/busybox:local from a busybox rootfs
#          (no registry needed).
#   stop:  stop the dockerd this script started (by its pid file), never by name.
# State lives in $HARNESS_DOCKER_STATE (default /tmp/serve-harness-docker): dockerd.pid, dockerd.log.
set -euo pipefail

STATE=${HARNESS_DOCKER_STATE:-/tmp/serve-harness-docker}
PID_FILE=$STATE/dockerd.pid
LOG_FILE=$STATE/dockerd.log
IMAGE=${HARNESS_DOCKER_IMAGE:-serve-harness/busybox:local}
WAIT_S=${HARNESS_DOCKER_WAIT_S:-60}

say() { echo "docker_setup: $*" >&2; }

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

install_missing() {
  local pkgs=()
  command -v dockerd >/dev/null || pkgs+=(docker.io)
  # the image needs a static busybox (the rootfs has no libc); the `busybox` package is dynamic
  dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' \
    || pkgs+=(busybox-static)
  if ((${#pkgs[@]})); then
    say "installing ${pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
  fi
}

# overlay2 shares image layers between containers; vfs copies the whole image for each one
# (measured with the 4.4 GiB CPU-tier image: 40 s to start a container on vfs).
storage_driver() {
  local probe
  probe=$(mktemp -d)
  mkdir -p "$probe"/{lower,upper,work,merged}
  if mount -t overlay overlay \
    -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" 2>/dev/null; then
    umount "$probe/merged"
    echo overlay2
  else
    echo vfs
  fi
  rm -rf "$probe"
}

start_daemon() {
  if answers; then
    say "a docker daemon already answers; leaving it alone"
    return
  fi
  mkdir -p "$STATE"
  local driver
  driver=$(storage_driver)
  say "starting dockerd, $driver storage (log: $LOG_FILE)"
  local t0=$SECONDS
  setsid dockerd --storage-driver="$driver" --bridge=none --iptables=false --ip6tables=false \
    --pidfile "$PID_FILE" >"$LOG_FILE" 2>&1 </dev/null &
  local launched=$!
  until answers; do
    if ! kill -0 "$launched" 2>/dev/null; then
      say "dockerd exited before answering; last log lines:"
      tail -n 20 "$LOG_FILE" >&2
      exit 1
    fi
    if ((SECONDS - t0 > WAIT_S)); then
      say "dockerd did not answer within ${WAIT_S}s; last log lines:"
      tail -n 20 "$LOG_FILE" >&2
      exit 1
    fi
    sleep 0.5
  done
  say "dockerd (pid $(cat "$PID_FILE")) answers after $((SECONDS - t0))s"
}

import_image() {
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "image $IMAGE already present"
    return
  fi
  local root
  root=$(mktemp -d)
  mkdir -p "$root"/{bin,tmp,results,workspace,etc}
  cp /bin/busybox "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  tar -C "$root" -cf - . | docker import --change 'WORKDIR /workspace' \
    --change 'CMD ["/bin/sh"]' - "$IMAGE" >/dev/null
  rm -rf "$root"
  say "imported $IMAGE"
}

stop_daemon() {
  if [[ ! -s $PID_FILE ]]; then
    say "no pid file at $PID_FILE: nothing of ours to stop"
    return
  fi
  local pid
  pid=$(cat "$PID_FILE")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "dockerd $pid ignored SIGTERM for 30s; sending SIGKILL"
      kill -KILL "$pid"
    fi
  fi
  rm -f "$PID_FILE"
  say "dockerd $pid stopped"
}

case ${1:-start} in
  start) install_missing; start_daemon; import_image ;;
  stop) stop_daemon ;;
  status) answers && say "daemon answers" || { say "no daemon answers"; exit 1; } ;;
  *) say "unknown command ${1}: use start, stop or status"; exit 2 ;;
esac
