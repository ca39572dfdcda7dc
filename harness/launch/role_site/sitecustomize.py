"""Put at the head of a role's PYTHONPATH by the harness. Observers that change nothing a role
computes, and a quick exit at teardown:

- with a Dynamo checkout (`--dynamo-src`, $HARNESS_IMPORT_RECORDS): records which file each
  `dynamo.<package>` is loaded from, so the harness can prove the checkout's code ran in that
  role. One JSON line per package, written the moment it is imported, to
  $HARNESS_IMPORT_RECORDS/<pid>.jsonl.
- on the CPU tier ($HARNESS_ENCODER_TAP): a copy of what Dynamo's vLLM encode worker's vision
  model returns for each image batch (`encode_image_embeddings`, before the handler does anything
  with it), written to $HARNESS_ENCODER_TAP/<key>.safetensors, the key the first 16 hex digits
  of the sha256 of the float32 pixel values it was given. The harness feeds these rows to the
  model's own language model (transformers) to judge every step after the encoder to the
  number, and judges the encoder itself against them.
- on the CPU tier too, the rows at each process boundary they cross unchanged by design
  (`BoundaryTap`, under $HARNESS_ENCODER_TAP/boundary): what an encode worker hands to Dynamo's
  embedding transfer (`send_embeddings`, any sender), what a worker receives from it
  (`receive_embeddings`), and what a worker hands its engine (vLLM's `AsyncLLM.generate`
  `multi_modal_data`, SGLang's `Engine.async_generate` precomputed embeddings). The harness
  holds them equal bit for bit (oracles/boundary.py): any corruption between two of them, of
  any size, names the role it happened in.
- at teardown ($HARNESS_STOPPING names a file the harness creates just before it signals the
  topology): once a role's own exit is done (its signal handlers, its threads joined, every
  atexit handler, the engine's own cleanup among them: this one is registered first, so it runs
  last), the role leaves with os._exit instead of finalising its interpreter. Measured on a
  vLLM worker (bench/teardown_speed.py): its atexit handlers were done 0.3 s after SIGTERM, the
  process gone 2.0-2.4 s after it, the rest spent freeing the interpreter's modules. A role that
  exits on its own before teardown exits as it always does, with its own code."""

import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


def _role_contract() -> ModuleType:
    """harness/core/role_contract.py, loaded by its path: a role's interpreter (the SGLang
    venv's, a checkout's) need not have the harness installed, and its sys.path stays its own."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "core", "role_contract.py")
    spec = importlib.util.spec_from_file_location("_harness_role_contract", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONTRACT = _role_contract()


class DynamoImportRecorder:
    """A meta-path finder that finds nothing itself: it looks where the path finder will load a
    `dynamo.<package>` from, writes that down and lets the import proceed."""

    def __init__(self, out_dir: str) -> None:
        self.out = os.path.join(out_dir, f"{os.getpid()}.jsonl")
        self.seen: set[str] = set()

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> None:
        if name.count(".") != 1 or not name.startswith("dynamo.") or name in self.seen:
            return None
        self.seen.add(name)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        record = {"pid": os.getpid(), "module": name, "file": spec.origin if spec else None}
        try:
            with open(self.out, "a") as out:
                out.write(json.dumps(record) + "\n")
        except OSError:
            pass  # a missing record is reported by the harness, naming the role
        return None


ENCODE_UTILS = "dynamo.vllm.multimodal_utils.encode_utils"


class EncoderTap:
    """A meta-path finder that, once `dynamo.vllm.multimodal_utils.encode_utils` has run, wraps
    its `encode_image_embeddings` (before the handler module imports the name)."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != ENCODE_UTILS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader: Any = spec.loader  # its exec_module is replaced: a loader of any kind
        run = loader.exec_module

        def run_and_wrap(module: Any) -> None:
            run(module)
            module.encode_image_embeddings = self.wrap(module.encode_image_embeddings)

        loader.exec_module = run_and_wrap
        return spec

    def wrap(self, encode: Callable[..., Any]) -> Callable[..., Any]:
        def encode_image_embeddings(*args: Any, **kwargs: Any) -> Any:
            rows = encode(*args, **kwargs)
            try:
                self.save(kwargs.get("image_embeds") or args[1], rows)
            except Exception as exc:  # an observer never breaks the role
                print(f"harness encoder tap: not recorded: {exc!r}", file=sys.stderr)
            return rows

        return encode_image_embeddings

    def save(self, image_embeds: Any, rows: Any) -> None:
        import hashlib

        from safetensors.torch import save_file

        pixels = image_embeds["pixel_values"].detach().float().cpu().contiguous()
        key = hashlib.sha256(pixels.numpy().tobytes()).hexdigest()[:16]
        target = os.path.join(self.out_dir, f"{key}.safetensors")
        partial = f"{target}.{os.getpid()}.partial"
        save_file({"rows": rows.detach().cpu().contiguous()}, partial)
        os.replace(partial, target)


class AfterImport:
    """A meta-path finder that runs `then(module)` once the named module has run: how a tap is
    put on a name before anything else imports it."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader: Any = spec.loader
        run = loader.exec_module

        def run_then(module: Any) -> None:
            run(module)
            try:
                self.then(module)
            except Exception as exc:  # an observer never breaks the role
                print(f"harness boundary tap: not put on {name}: {exc!r}", file=sys.stderr)

        loader.exec_module = run_then
        return spec


class BoundaryTap:
    """Copies of the rows each role sends, receives and hands its engine, one file per tensor:
    <kind>-<role>-<pid>-<n>.safetensors (kind: encoded (SGLang's vision model), sent,
    received, consumed)."""

    TRANSFER = "dynamo.common.multimodal.embedding_transfer"
    SGLANG_ENCODE = "dynamo.sglang._compat"
    VLLM_ENGINE = "vllm.v1.engine.async_llm"
    SGLANG_ENGINE = "sglang.srt.entrypoints.engine"

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.role = os.environ.get(CONTRACT.TAPPED_ROLE_ENV, "role")  # the role adapter's
        self.count = 0

    def finders(self) -> list[AfterImport]:
        return [
            AfterImport(self.TRANSFER, self.on_transfer),
            AfterImport(self.SGLANG_ENCODE, self.on_sglang_encode),
            AfterImport(self.VLLM_ENGINE, self.on_vllm_engine),
            AfterImport(self.SGLANG_ENGINE, self.on_sglang_engine),
        ]

    def save(self, kind: str, tensors: list[Any]) -> None:
        from safetensors.torch import save_file

        for tensor in tensors:
            self.count += 1
            name = f"{kind}-{self.role}-{os.getpid()}-{self.count}.safetensors"
            target = os.path.join(self.out_dir, name)
            save_file({"rows": tensor.detach().cpu().contiguous()}, target + ".partial")
            os.replace(target + ".partial", target)

    def keep(self, kind: str, tensors: list[Any]) -> None:
        try:
            self.save(kind, tensors)
        except Exception as exc:
            print(f"harness boundary tap: {kind} not recorded: {exc!r}", file=sys.stderr)

    def on_transfer(self, module: Any) -> None:
        for cls in vars(module).values():
            if not isinstance(cls, type) or cls.__module__ != module.__name__:
                continue
            if "send_embeddings" in vars(cls):
                cls.send_embeddings = self.sending(cls.send_embeddings)
            if "receive_embeddings" in vars(cls):
                cls.receive_embeddings = self.receiving(cls.receive_embeddings)

    def sending(self, send: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        @functools.wraps(send)
        async def send_embeddings(this: Any, embeddings: Any, *args: Any, **kwargs: Any) -> Any:
            self.keep("sent", [embeddings])
            return await send(this, embeddings, *args, **kwargs)

        return send_embeddings

    def receiving(self, receive: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        @functools.wraps(receive)
        async def receive_embeddings(this: Any, *args: Any, **kwargs: Any) -> Any:
            received = await receive(this, *args, **kwargs)
            self.keep("received", [received[1]])
            return received

        return receive_embeddings

    def on_sglang_encode(self, module: Any) -> None:
        """SGLang's encode worker's vision model (`mm_encode`, before the handler imports it):
        what vLLM's encoder tap is to vLLM's, its rows as kind `encoded`."""
        import functools

        encode = module.mm_encode

        @functools.wraps(encode)
        async def mm_encode(*args: Any, **kwargs: Any) -> Any:
            encoded = await encode(*args, **kwargs)
            self.keep("encoded", [encoded[1]])
            return encoded

        module.mm_encode = mm_encode

    def on_vllm_engine(self, module: Any) -> None:
        import functools

        generate = module.AsyncLLM.generate

        @functools.wraps(generate)
        def tapped(this: Any, prompt: Any, *args: Any, **kwargs: Any) -> Any:
            data = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
            self.keep("consumed", embedding_tensors(data))
            return generate(this, prompt, *args, **kwargs)

        module.AsyncLLM.generate = tapped

    def on_sglang_engine(self, module: Any) -> None:
        import functools

        generate = module.Engine.async_generate

        @functools.wraps(generate)
        def tapped(this: Any, *args: Any, **kwargs: Any) -> Any:
            items = kwargs.get("image_data") or kwargs.get("video_data")
            self.keep("consumed", embedding_tensors(items))
            return generate(this, *args, **kwargs)

        module.Engine.async_generate = tapped


def embedding_tensors(data: Any) -> list[Any]:
    """The embedding tensors in an engine's multimodal input: vLLM's `multi_modal_data`
    (a tensor, or {"image_embeds": tensor, ...}, per modality) and SGLang's items
    ({"precomputed_embeddings": tensor, ...}); media (images, frames) are not rows."""
    found: list[Any] = []
    if data is None:
        return found
    if type(data).__name__ == "Tensor" and getattr(data, "dim", lambda: 0)() >= 2:
        return [data] if data.is_floating_point() else []
    if isinstance(data, dict):
        for key in ("image_embeds", "video_embeds", "precomputed_embeddings"):
            if key in data:
                return embedding_tensors(data[key])
        if "format" in data or "modality" in data:
            return found
        for value in data.values():
            found += embedding_tensors(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            found += embedding_tensors(value)
    return found


def leave_at_once_when_stopping(stopping: str) -> None:
    """Registered before any module of the role's: atexit runs it after all of theirs."""
    import atexit
    import contextlib

    def exit_now() -> None:
        if os.path.exists(stopping):
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone
                    stream.flush()
            os._exit(0)

    atexit.register(exit_now)


_stopping = os.environ.get(CONTRACT.STOPPING_ENV)
if _stopping:
    leave_at_once_when_stopping(_stopping)

_tap = os.environ.get(CONTRACT.ENCODER_TAP_ENV)
if _tap:
    os.makedirs(_tap, exist_ok=True)
    sys.meta_path.insert(0, EncoderTap(_tap))
    _boundary = os.path.join(_tap, "boundary")
    os.makedirs(_boundary, exist_ok=True)
    sys.meta_path[:0] = BoundaryTap(_boundary).finders()

_records = os.environ.get(CONTRACT.IMPORT_RECORDS_ENV)
if _records:
    os.makedirs(_records, exist_ok=True)
    sys.meta_path.insert(0, DynamoImportRecorder(_records))
