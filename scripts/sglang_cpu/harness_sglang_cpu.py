"""Imports the sgl_kernel stand-in (scripts/sglang_cpu/sgl_kernel) before `sglang` is first
imported in a process, so the module-level `torch.ops.sgl_kernel.<op>` references of SGLang's
modules resolve. Installed with harness_sglang_cpu.pth into the CPU tier's SGLang venv; costs
nothing in a process that never imports sglang."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _BeforeSGLang(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "sglang":
            sys.meta_path.remove(self)
            import sgl_kernel  # noqa: F401
        return None


def install() -> None:
    sys.meta_path.insert(0, _BeforeSGLang())
