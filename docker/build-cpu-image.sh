#!/usr/bin/env bash
# Build the CPU-tier serving image (serve-harness/cpu:local by default) from this checkout.
#
#   docker/build-cpu-image.sh [TAG]
#
# Two images, so that a change to the checkout rebuilds only a thin layer:
#   serve-harness/cpu-venv:<bootstrap key>  Debian + the venv bootstrap.sh builds from the lock;
#                                           built only when the key (lock, shims, bootstrap) moves
#   TAG                                     that + this checkout at /workspace
# The base is $HARNESS_DOCKER_BASE (default debian:bookworm-slim) if it is local or can be pulled;
# otherwise (no registry reachable, as on CI boxes) serve-harness/debian-base:bookworm is made
# from Debian's own packages with debootstrap and `docker import` (needs root).
# Wheels: `pip download` with this machine's pip configuration into $HARNESS_CACHE/wheelhouse/cpu
# (kept: a new lock downloads only the wheels it adds), served to the build over loopback HTTP
# for as long as it runs. Engines images of older keys are removed once a new one is built.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tag=${1:-serve-harness/cpu:local}
cache=${HARNESS_CACHE:-$HOME/.cache/serve-harness}
base=${HARNESS_DOCKER_BASE:-debian:bookworm-slim}
# the Debian packages the image carries (docker/packages.txt): a new one builds a new base
packages=$(grep -v '^#' "$root/docker/packages.txt" | sha256sum | cut -c1-8)
debian_base=serve-harness/debian-base:bookworm-$packages
mirror=${HARNESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
python=${HARNESS_PYTHON:-python3}

say() { printf '[build-cpu-image] %s\n' "$*" >&2; }
has_image() { docker image inspect "$1" >/dev/null 2>&1; }
start=$SECONDS

docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
  || { say "no Docker daemon answers; start one (sudo .ci/docker_setup.sh start)"; exit 2; }

# the vLLM venv's key, the SGLang venv's inputs (its lock and CPU stand-ins) and the base's
# packages: any of them moves it
key=$(HARNESS_TIER=cpu "$root/scripts/bootstrap.sh" --key)-$(cat "$root/requirements/cpu-sglang.lock" \
  "$root"/scripts/sglang_cpu/*.py "$root"/scripts/sglang_cpu/*/*.py | sha256sum | cut -c1-8)-$packages
venv_image=serve-harness/cpu-venv:$key

build_debian_base() {
  [[ $(id -u) == 0 ]] || { say "debootstrap needs root; or give a pullable HARNESS_DOCKER_BASE"; exit 2; }
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    # onto stderr: pick_base's stdout is the base image's name (seen: apt's lines became it)
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } >&2
  }
  local rootfs
  rootfs=$(mktemp -d "${TMPDIR:-/tmp}/serve-harness-rootfs.XXXXXX")
  # shellcheck disable=SC2064  # expand now: the trap must remove this rootfs, not a later one
  trap "rm -rf '$rootfs'" EXIT
  local include
  include=$(grep -v '^#' "$root/docker/packages.txt" | paste -sd, -)
  say "debootstrap bookworm (minbase + $include) from $mirror"
  debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$mirror" >/dev/null
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | docker import -c 'CMD ["/bin/bash"]' - "$debian_base" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
}

pick_base() {
  if has_image "$base" || docker pull -q "$base" >/dev/null 2>&1; then
    echo "$base"
    return
  fi
  has_image "$debian_base" || { say "$base cannot be pulled; building $debian_base"; build_debian_base; }
  echo "$debian_base"
}

fill_wheelhouse() {
  local house=$1
  [[ -f $house/.complete-$key ]] && return
  say "downloading the lock's wheels into $house"
  mkdir -p "$house"
  local lock  # one download per lock: the two venvs pin different versions of shared packages
  for lock in cpu.lock cpu-sglang.lock; do
    "$python" -m pip download -q --no-deps -d "$house" -r "$root/requirements/$lock" pip==25.3 \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  done
  touch "$house/.complete-$key"
}

remove_older_venv_images() {
  local old
  for old in $(docker image ls --format '{{.Repository}}:{{.Tag}}' serve-harness/cpu-venv); do
    [[ $old == "$venv_image" ]] || docker image rm "$old" >/dev/null 2>&1 || true
  done
}

build_venv_image() {
  local house=$cache/wheelhouse/cpu
  fill_wheelhouse "$house"
  local port server
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$python" -m http.server --bind 127.0.0.1 --directory "$house" "$port" >/dev/null 2>&1 &
  server=$!
  # shellcheck disable=SC2064
  trap "kill $server 2>/dev/null || true" EXIT
  local from
  from=$(pick_base)
  say "building $venv_image from $from"
  docker build -q --network host -f "$root/docker/cpu-venv.Dockerfile" \
    --build-arg BASE="$from" --build-arg WHEELS="http://127.0.0.1:$port/" \
    -t "$venv_image" "$root" >/dev/null
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  trap - EXIT
  remove_older_venv_images
}

has_image "$venv_image" || build_venv_image
say "building $tag from $venv_image"
docker build -q -f "$root/docker/cpu.Dockerfile" --build-arg VENV_IMAGE="$venv_image" \
  -t "$tag" "$root" >/dev/null
# the previous build of TAG, now untagged: only images these Dockerfiles labelled
docker image prune -f --filter label=serve-harness.image >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$tag")
say "$tag ready in $((SECONDS - start)) s ($((size / 1024 / 1024)) MiB)"
