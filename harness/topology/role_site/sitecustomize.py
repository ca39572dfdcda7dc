"""Put at the head of a role's PYTHONPATH by the harness. Two observers; neither changes what a
role computes:

- with a Dynamo checkout (`--dynamo-src`, $HARNESS_IMPORT_RECORDS): records which file each
  `dynamo.<package>` is loaded from, so the harness can prove the checkout's code ran in that
  role. One JSON line per package, written the moment it is imported, to
  $HARNESS_IMPORT_RECORDS/<pid>.jsonl.
- on the CPU tier ($HARNESS_ENCODER_TAP): a copy of what Dynamo's vLLM encode worker's vision
  model returns for each image batch (`encode_image_embeddings`, before the handler does anything
  with it), written to $HARNESS_ENCODER_TAP/<key>.safetensors, the key the first 16 hex digits
  of the sha256 of the float32 pixel values it was given. The harness feeds these rows to the
  model's own language model (transformers) to judge every step after the encoder to the
  number, and judges the encoder itself against them."""

import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


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


_tap = os.environ.get("HARNESS_ENCODER_TAP")
if _tap:
    os.makedirs(_tap, exist_ok=True)
    sys.meta_path.insert(0, EncoderTap(_tap))

_records = os.environ.get("HARNESS_IMPORT_RECORDS")
if _records:
    os.makedirs(_records, exist_ok=True)
    sys.meta_path.insert(0, DynamoImportRecorder(_records))
