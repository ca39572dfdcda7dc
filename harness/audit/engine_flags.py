"""Engine flags checked with the engines' own argument parsers, imported once per audit run."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from unittest import mock

from harness.audit.capture import Invocation

Parse = Callable[[list[str]], object]


@dataclass(frozen=True)
class FlagCheck:
    method: str
    error: str | None


@functools.cache
def _vllm_parser() -> Parse:
    """dynamo.vllm's own split parser: Dynamo arg groups + vLLM's AsyncEngineArgs (~9 s import)."""
    from dynamo.vllm.args import _parse_cli_args

    return _parse_cli_args


@functools.cache
def _frontend_parser() -> Parse:
    from dynamo.frontend.frontend_args import FrontendArgGroup, FrontendConfig

    def parse(argv: list[str]) -> object:
        parser = argparse.ArgumentParser(prog="dynamo.frontend")
        FrontendArgGroup().add_arguments(parser)
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # main.py: without --chat-processor vllm|sglang extras are an error
            raise ValueError(f"Unknown arguments specified: {unknown}")
        config = FrontendConfig.from_cli_args(args)
        config.validate()
        return config

    return parse


@functools.cache
def _sglang_parser() -> Parse:
    from harness.audit.sglang_parser import parse

    return parse


PARSERS: dict[str, tuple[str, Callable[[], Parse]]] = {
    "dynamo.frontend": (
        "dynamo.frontend FrontendArgGroup + FrontendConfig.validate",
        _frontend_parser,
    ),
    "dynamo.vllm": ("dynamo.vllm.args._parse_cli_args (Dynamo groups + vLLM parser)", _vllm_parser),
    "dynamo.sglang": (
        "dynamo.sglang arg groups + Dynamo's normalisation + SGLang 0.5.21 flag table",
        _sglang_parser,
    ),
}


def check_flags(call: Invocation) -> FlagCheck | None:
    """None for a process that is not an engine (e.g. the event broker script)."""
    entry = PARSERS.get(call.module)
    if entry is None:
        return None
    method, load = entry
    stderr = io.StringIO()
    try:
        parse = load()
        with mock.patch.dict(os.environ, call.env), contextlib.redirect_stderr(stderr):
            parse(call.engine_args)
    except SystemExit:
        lines = [ln for ln in stderr.getvalue().splitlines() if ln.strip()]
        return FlagCheck(method, lines[-1] if lines else "parser exited")
    except Exception as exc:  # any refusal by the engine's own config code is the finding
        return FlagCheck(method, f"{type(exc).__name__}: {exc}")
    return FlagCheck(method, None)
