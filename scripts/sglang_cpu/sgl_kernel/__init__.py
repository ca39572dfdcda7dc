"""CPU stand-in for the `sglang-kernel` package, installed into the CPU tier's SGLang venv by
scripts/bootstrap.sh.

SGLang 0.5.21 imports its kernel package at module level on every platform, CPU included; no CPU
build of it is on PyPI (upstream builds one from source for Xeon with AMX), and the CUDA wheel
needs libcuda to import. On a CPU without AMX, SGLang's layers run their plain-torch paths
(activation, layernorm, rotary, vision attention; `--attention-backend torch_native` is SDPA),
so the kernels are imported but not called. Here every name imports, from the package and from
`torch.ops.sgl_kernel`; a kernel that IS called raises NotImplementedError naming itself, so a
path that needs one fails loudly instead of computing something else (SGLang's own CPU unit
tests stub the package with MagicMock, which would return garbage silently).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, cast

import torch

# Ops sglang 0.5.21 reads from torch.ops.sgl_kernel when a module is imported (found by walking
# every module's top-level code for `torch.ops.sgl_kernel.<name>`). Any other op is absent, so
# SGLang's `hasattr(torch.ops.sgl_kernel, op)` checks (fake-tensor registrations) say no.
IMPORT_TIME_OPS = frozenset(
    {
        "apply_rotary_pos_emb_cpu",
        "conv3d_embed_cpu",
        "flash_attn_varlen_func",
        "fused_gdn_gating_cpu",
        "fused_qk_gemma_rmsnorm_cpu",
        "fused_qk_gemma_rmsnorm_with_gate_cpu",
        "fused_qkvzba_split_reshape_cat_contiguous_cpu",
        "fused_sigmoid_gating_delta_rule_update_cpu",
        "fused_sigmoid_mul_cpu",
    }
)


def _missing(name: str) -> Callable[..., NoReturn]:
    def missing(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel.{name} was called: the CPU tier's stand-in (scripts/sglang_cpu) has no "
            "kernels; this SGLang path needs the real CPU kernel package"
        )

    missing.__name__ = name
    return missing


class _OpsNamespace:
    """What `torch.ops.sgl_kernel` resolves to."""

    def __getattr__(self, name: str) -> Callable[..., NoReturn]:
        if name in IMPORT_TIME_OPS:
            return _missing(name)
        raise AttributeError(f"torch.ops.sgl_kernel.{name}: not in the CPU stand-in")


# torch.ops declares no namespaces (it makes them on attribute access): assigned through Any
cast(Any, torch.ops).sgl_kernel = _OpsNamespace()


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing(name)
