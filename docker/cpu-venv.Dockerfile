# The CPU tier's engines: Debian + the venv scripts/bootstrap.sh builds from requirements/cpu.lock
# (the same script, lock and shims as on the host; no second list of versions). Built by
# docker/build-cpu-image.sh, which tags it with bootstrap's own venv key and rebuilds it only when
# that key changes. The wheels come from a loopback HTTP wheelhouse the script serves from the
# host (host network), so the image holds no wheel files and needs no index of its own.
# Both stacks: the vLLM venv and the SGLang venv (its own lock and CPU stand-ins,
# scripts/sglang_cpu/), so a docker run covers upstream's pre_merge gate on vLLM and SGLang alike.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
LABEL serve-harness.image=cpu-venv
COPY docker/packages.txt /tmp/packages.txt
RUN set -e; pkgs=$(grep -v '^#' /tmp/packages.txt | tr '\n' ' '); \
    if ! dpkg -s $pkgs >/dev/null 2>&1; then \
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs \
      && rm -rf /var/lib/apt/lists/*; \
    fi; \
    rm /tmp/packages.txt
WORKDIR /workspace
COPY requirements/ requirements/
COPY scripts/bootstrap.sh scripts/apply_shims.py scripts/serve_harness_checkout.py scripts/
COPY scripts/sglang_cpu/ scripts/sglang_cpu/
ARG WHEELS
RUN test -n "$WHEELS" || { echo "build arg WHEELS (the wheelhouse URL) is empty" >&2; exit 2; }; \
    PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS" PIP_NO_CACHE_DIR=1 \
    HARNESS_CACHE=/opt/serve-harness HARNESS_TIER=cpu HARNESS_PYTHON=python3.11 \
    scripts/bootstrap.sh
