# The CPU-tier serving image: the engines image (cpu-venv.Dockerfile) plus this checkout at
# /workspace, as upstream's CI images hold theirs. Run it with `python -m harness docker`, which
# mounts the host's cache (tiny models, built on first use), results dir and lease registries.
ARG VENV_IMAGE
FROM ${VENV_IMAGE}
LABEL serve-harness.image=cpu
COPY . /workspace
ENV PATH=/workspace/.venv/bin:$PATH \
    HARNESS_TIER=cpu
