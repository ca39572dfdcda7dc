"""The engine flags and environment a role's command line meets on each tier, as tables the
role adapter (role_adapter.py) applies: which dynamo.vllm and dynamo.sglang flags pass through on
the CPU tier, which the CPU tier's own replace, which the GPU memory plan replaces (by the
variables harness/core/role_contract.py names), and the CPU engines' flags and environment.
Standard library only, as the adapter is."""

from __future__ import annotations

import shlex
from pathlib import Path

from harness.core.role_contract import (
    GPU_UTIL_ENV,
    KV_BYTES_ENV,
    KV_TOKENS_ENV,
    MAX_MODEL_LEN_ENV,
    MAX_NUM_BATCHED_TOKENS_ENV,
    MAX_NUM_SEQS_ENV,
    MEM_FRACTION_ENV,
)

# A role's flags that bind a TCP port of their own (SGLang's rendezvous, server, bootstrap).
PORT_FLAGS = {"--nccl-port", "--port", "--disaggregation-bootstrap-port", "--http-port"}
CPU_ARGS_FILE = Path(__file__).resolve().parents[2] / "launchers" / "lib" / "cpu_engine_args"

# dynamo.vllm flags that mean the same on the CPU tier: passed through as they are.
KEEP_SWITCHES = {
    "--enable-multimodal",
    "--route-to-encoder",
    "--enable-mm-embeds",
    "--frontend-decoding",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--trust-remote-code",
    "--is-prefill-worker",
    "--is-decode-worker",
}
KEEP_VALUED = {
    "--disaggregation-mode",
    "--served-model-name",
    "--limit-mm-per-prompt",
    "--max-num-seqs",
    "--embedding-transfer-mode",
    "--namespace",
    "--component",
    "--endpoint",
    "--multimodal-embedding-cache-capacity-gb",
    "--connector",
    "--router-mode",
    # the engine's step and encoder budget, not memory: it also sizes vLLM's encoder cache
    # (upstream's uuid pass-through passes 280, one Gemma-4 image)
    "--max-num-batched-tokens",
    "--mm-processor-cache-gb",  # a cap on host memory for processed media, on either tier
}
# GPU-only sizing the CPU tier's own flags replace (launchers/lib/cpu_engine_args).
REPLACED_VALUED = {
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--max-model-len",
    "--dtype",
    "--block-size",
    "--tensor-parallel-size",
}
REPLACED_SWITCHES = {"--enforce-eager"}
EMBEDDING_TRANSFER = "--embedding-transfer-mode"
ENCODE_WORKER_SWITCH = "--multimodal-encode-worker"  # older dynamo.vllm's encode mode
SGLANG_TRANSFER_ENV = "DYN_SGL_EMBEDDING_TRANSFER_MODE"  # dynamo.sglang's variable behind the flag
# vLLM's CPU platform, run as the CPU tier runs it: the engine core in the worker's process tree
# as vLLM starts it, no OpenMP core pinning (2 shared cores), no usage reports, and torch.compile
# off. The CPU tier runs eager (--enforce-eager: no model graph is compiled); the one function
# still compiled is vLLM's logprob-rank count (vllm/v1/sample/ops/logprobs.py,
# batched_count_greater_than, inductor), on the first request asking for logprobs in each engine
# process: 6.7 s on 2 cores (docs/measurements.md, the serve suite row), for
# `(x >= values).sum(-1)`, the same integers eager.
CPU_VLLM_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TORCH_COMPILE_DISABLE": "1",
}
# NIXL's progress thread otherwise spins a core per agent (the venv's NIXL shim reads this).
NIXL_PTHR_DELAY = ("HARNESS_NIXL_PTHR_DELAY_US", "1000")
# The KV block size a KV-aware frontend and the workers agree on, by stack: vLLM's CPU attention
# backend takes multiples of 32 only and vLLM-CPU's default is 128 (CUDA's default is 16);
# SGLang on CPU allocates KV token by token (page size 1: SGLANG_REPLACED_VALUED).
CPU_KV_BLOCK = {"dynamo-vllm": "128", "dynamo-sglang": "1"}
# vLLM's memory flags the GPU memory plan replaces, and Dynamo's Qwen-VL encode worker, which
# runs its own vLLM (vision tower only) sized by these variables, not by its command line
# (dynamo/vllm/multimodal_utils/model.py load_vision_model).
VLLM_PLANNED = {
    "--kv-cache-memory-bytes": KV_BYTES_ENV,
    "--gpu-memory-utilization": GPU_UTIL_ENV,
    "--max-model-len": MAX_MODEL_LEN_ENV,
    "--max-num-seqs": MAX_NUM_SEQS_ENV,
    "--max-num-batched-tokens": MAX_NUM_BATCHED_TOKENS_ENV,
}
VLLM_ENCODER_PLANNED = {
    "DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES": KV_BYTES_ENV,
    "DYN_VLLM_ENCODER_GPU_MEMORY_UTILIZATION": GPU_UTIL_ENV,
    "DYN_VLLM_ENCODER_MAX_NUM_SEQS": MAX_NUM_SEQS_ENV,
}
# SGLang sizes its KV pool from the memory free when it loads, minus total x (1 - fraction): the
# plan derives the fraction from the role's slot on its card and caps the pool at its tokens.
SGLANG_PLANNED = {
    "--mem-fraction-static": MEM_FRACTION_ENV,
    "--max-running-requests": MAX_NUM_SEQS_ENV,
    "--context-length": MAX_MODEL_LEN_ENV,
    "--max-total-tokens": KV_TOKENS_ENV,
    "--chunked-prefill-size": MAX_NUM_BATCHED_TOKENS_ENV,
    "--max-prefill-tokens": MAX_NUM_BATCHED_TOKENS_ENV,
}
MODEL_FLAG = {"dynamo.vllm": "--model", "dynamo.sglang": "--model-path"}
KV_TRANSFER_BACKEND = "--disaggregation-transfer-backend"
RETRACTION = "--disaggregation-decode-retraction-backup"
# dynamo.sglang flags that mean the same on the CPU tier: passed through as they are.
SGLANG_KEEP_SWITCHES = {
    "--enable-multimodal",
    "--dedicated-mm-encoder",
    "--skip-tokenizer-init",
    "--trust-remote-code",
    "--disable-radix-cache",
    "--frontend-decoding",
    "--enable-metrics",
}
SGLANG_KEEP_VALUED = {
    "--disaggregation-mode",
    "--disaggregation-decode-retraction-backup",
    "--disaggregation-bootstrap-port",
    "--chat-template",
    "--embedding-transfer-mode",
    "--served-model-name",
    "--tp-size",
    "--tp",
    "--multimodal-embedding-cache-capacity-gb",
    "--nccl-port",
    "--namespace",
    "--component",
    "--endpoint",
    "--kv-events-config",
    "--dyn-reasoning-parser",
    "--dyn-tool-call-parser",
}
# GPU sizing and GPU-only choices the CPU tier's own flags replace (CPU_SGLANG_ARGS), and
# `--page-size`: SGLang's paged KV allocator is a Triton kernel with no CPU driver (0.5.21,
# mem_cache/allocator/paged.py alloc_extend_kernel), so the CPU tier allocates token by token.
SGLANG_REPLACED_VALUED = {
    *SGLANG_PLANNED,
    "--page-size",
    "--dtype",
    "--device",
    "--attention-backend",
    "--cuda-graph-max-bs",
    "--host",
}
SGLANG_REPLACED_SWITCHES = {
    "--disable-cuda-graph",
    "--disable-piecewise-cuda-graph",
    "--disable-overlap-schedule",
}
# SGLang's GPU memory options in upstream's launchers (disagg_same_gpu.sh), dropped on the CPU
# tier: each changes where memory lives, not what is computed.
SGLANG_GPU_MEMORY_SWITCHES = {
    # torch_memory_saver: releases and resumes CUDA allocations on request (a CUDA allocator hook)
    "--enable-memory-saver": "releases GPU memory on request; a CUDA allocator hook",
    # weights kept on the host while the GPU copy is released: no GPU copy on the CPU tier
    "--enable-weights-cpu-backup": "a host copy of GPU-released weights",
    # deletes the checkpoint directory once loaded: here the session's shared tiny checkpoint
    "--delete-ckpt-after-loading": (
        "would delete the tiny checkpoint every launch of the session shares"
    ),
}
# flags that take no value, whichever engine's (split_args)
SWITCHES = {
    *SGLANG_KEEP_SWITCHES,
    *SGLANG_REPLACED_SWITCHES,
    *SGLANG_GPU_MEMORY_SWITCHES,
    ENCODE_WORKER_SWITCH,
}
# XPU launchers on the CPU tier (upstream's xpu/*.sh, DEVICE_PLATFORM=xpu): each choice is of
# where a role runs or how its KV is paged, not of what it computes.
XPU_ENV_ON_CPU = {
    # the Level Zero device a role runs on (as CUDA_VISIBLE_DEVICES for CUDA): no device here
    "ZE_AFFINITY_MASK": "the role's XPU device; the CPU tier has none",
}
# `--block-size 64` (XPU's paged attention block): the CPU tier's own block size replaces it
# (REPLACED_VALUED; vLLM's CPU attention takes multiples of 32), and `kv_buffer_device: xpu`
# in --kv-transfer-config becomes cpu (cpu_vllm_args), as `cuda` does.
# SGLang's CPU backend, without its CPU kernel package (scripts/sglang_cpu/sgl_kernel):
# `torch_native` attention (SDPA; the default CPU backend needs the kernels), no overlap
# scheduler (it needs a device stream), float32 like every CPU-tier computation, and the same
# small context and token pool as the CPU tier's vLLM engines (launchers/lib/cpu_engine_args:
# --max-model-len 2048; a few KiB per token on the tiny checkpoints).
CPU_SGLANG_ARGS = shlex.split(
    "--device cpu --attention-backend torch_native --disable-overlap-schedule --dtype float32 "
    "--context-length 2048 --max-total-tokens 8192 --max-running-requests 4 "
    "--chunked-prefill-size 2048 --max-prefill-tokens 2048"
)
# An idle SGLang scheduler otherwise polls its sockets without blocking and checks its pools on
# every pass (scheduler.py on_idle): a whole core per worker, measured at 122 % each on the idle
# CPU router; with it, 1.5 % and the router's 50-token requests 0.84 s -> 0.35 s
# (bench/sglang_pace.py). The bench's baseline sets the variable to 0.
SGLANG_SLEEP_ON_IDLE = ("HARNESS_SGLANG_SLEEP_ON_IDLE", "1")
# SGLANG_USE_CPU_ENGINE: SGLang's CPU platform, as its CPU docs run it. TORCH_COMPILE_DISABLE:
# the vision tower's rotary embedding is torch.compile-decorated (layers/attention/vision.py
# apply_rotary_pos_emb), and Inductor on CPU compiles C++ on the first image and again per new
# shape: the first image request after ready took 9.5-12 s, later ones on the router ~1 s of
# compiling (py-spy; bench/sglang_pace.py); eager as the model's own reference runs it.
CPU_SGLANG_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "DO_NOT_TRACK": "1", "TORCH_COMPILE_DISABLE": "1"}
