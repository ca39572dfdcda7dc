"""Engine flags checked with the engines' own argument parsers, imported once per audit run.

dynamo.frontend and dynamo.vllm parse with their installed parsers. dynamo.sglang parses without
SGLang (it lives in its own venv: SGLang and vLLM pin different transformers): `parse` mirrors
`dynamo/sglang/args.py:parse_args` up to `sglang_only_parser.parse_args`: the Dynamo runtime +
SGLang-wrapper arg groups and router flags come from the installed ai-dynamo; the multimodal
normalisation (`--disaggregation-mode encode|pd` to SGLang's values) is the installed args.py's own
functions, loaded from its source; the remaining args meet a parser rebuilt from sglang_flags.json
(SGLang's real ServerArgs.add_cli_args, dumped from its release wheel by sglang_flags_dump.py). Not
covered: ServerArgs.from_cli_args (loads the model config) and SGLang's own validation."""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib.util
import io
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from unittest import mock

from dynamo.common.configuration.groups.router_args import (
    parse_worker_router_config,
    register_worker_router_help,
)
from dynamo.common.configuration.groups.runtime_args import (
    DynamoRuntimeArgGroup,
    DynamoRuntimeConfig,
)
from dynamo.common.constants import DisaggregationMode
from dynamo.sglang.backend_args import DynamoSGLangArgGroup, DynamoSGLangConfig

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

    parse: Parse = _parse_cli_args
    return parse


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


def _sglang_parser() -> Parse:
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


TABLE = Path(__file__).with_name("sglang_flags.json")
_NORMALISERS = (
    "_get_last_cli_flag_value",
    "_remove_cli_flag_and_value",
    "_set_cli_flag_value",
    "_normalize_multimodal_disaggregation_args",
)


@functools.cache
def table() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(TABLE.read_text())
    return loaded


@functools.cache
def _installed_args_source() -> Path:
    spec = importlib.util.find_spec("dynamo.sglang")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "args.py"


@functools.cache
def _normaliser() -> Any:
    """`_normalize_multimodal_disaggregation_args` from the installed args.py (which imports
    SGLang at module level, so the functions are compiled from its source on their own)."""
    tree = ast.parse(_installed_args_source().read_text())
    keep: list[ast.stmt] = []
    for node in tree.body:
        wanted_def = isinstance(node, ast.FunctionDef) and node.name in _NORMALISERS
        wanted_const = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PREFILL_DECODE_DISAGGREGATION_MODE"
            for t in node.targets
        )
        if wanted_def or wanted_const:
            keep.append(node)
    names = {n.name for n in keep if isinstance(n, ast.FunctionDef)}
    missing = set(_NORMALISERS) - names
    if missing:
        raise RuntimeError(f"installed dynamo/sglang/args.py lacks {sorted(missing)}")
    scope: dict[str, Any] = {
        "DisaggregationMode": DisaggregationMode,
        "logging": logging,
        "Optional": Optional,
        "Any": Any,
    }
    code = compile(ast.Module(body=keep, type_ignores=[]), str(_installed_args_source()), "exec")
    exec(code, scope)
    return scope["_normalize_multimodal_disaggregation_args"]


@functools.cache
def _sglang_only_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang ServerArgs", add_help=False)
    for i, (flag, spec) in enumerate(table()["flags"].items()):
        kwargs: dict[str, Any] = {"dest": f"f{i}"}
        nargs = spec["nargs"]
        if nargs == 0:
            kwargs["action"] = "store_true"
        elif nargs is not None:
            kwargs["nargs"] = nargs
        if "choices" in spec and nargs != 0:
            kwargs["choices"] = spec["choices"]
        parser.add_argument(flag, **kwargs)
    return parser


class DynamoConfig(DynamoRuntimeConfig, DynamoSGLangConfig):
    """As dynamo.sglang.args.DynamoConfig (which cannot be imported without SGLang)."""

    def validate(self) -> None:
        DynamoRuntimeConfig.validate(self)
        DynamoSGLangConfig.validate(self)


def parse(argv: list[str]) -> object:
    parser = argparse.ArgumentParser(prog="dynamo.sglang")
    DynamoRuntimeArgGroup().add_arguments(parser)
    DynamoSGLangArgGroup().add_arguments(parser)
    register_worker_router_help(parser)
    dynamo_args, unknown = parser.parse_known_args(argv)
    config = DynamoConfig.from_cli_args(dynamo_args)
    config.router_advertisement, unknown = parse_worker_router_config(unknown)
    config.validate()
    unknown = _normaliser()(unknown, config)
    config.validate_multimodal_topology()
    return _sglang_only_parser().parse_args(unknown)
