"""The encoder's own rows, and the model's language model given them: how every encoder path is
judged to the number on the CPU tier, declared defect or not.

A request whose image goes through Dynamo's vLLM encode worker has two computations behind its
answer: the encoder's (the vision tower and projector, in the encode worker) and the language
model's (the PD, or the prefill and decode workers, on the rows the encoder sent). The role
site's tap (harness/launch/role_site/sitecustomize.py) copies what the encode worker's vision
model returned for each image, keyed by its pixel values. From it, with transformers only:

- `encoder_features`: what the model's own weights compute for the image: the model's own
  features in float32, or what a declared encoder defect says the encoder computes instead
  (`EncoderRecipe`: its dtype, its feature layer). The encoder oracle holds the tapped rows to it.
- `reference_on_rows`: the model's language model given the encoder's rows, placed as the path
  places them: one placeholder per row (an E/PD worker places every row the encoder sent, even
  where the model's processor places fewer); with a prefill/decode split, the prefill worker's
  KV for all but the last of the decode worker's own prompt tokens (the processor's), the last
  one recomputed there. Every step after the encoder is then in the checkpoint's dtype on both
  sides, so the engine's log-probabilities must equal these within that precision's tolerance
  (core/precision.py), whatever the encoder computed (measured: Qwen3-VL E/PD 9.2e-06 over 73
  tokens; LLaVA E/PD 7.0e-07 and E/P/D 6.7e-07 over 100, design-deviations.md at 7310361,
  issue 37).

Model families: Qwen3-VL (its rows are the main embeddings and the deepstack features side by
side, as vLLM's `embed_multimodal` returns them) and LLaVA."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.oracles.media_mirror import VLLM, MediaFetcher
from harness.oracles.model_reference import Reference, load_model, steps_of
from harness.oracles.processor import processor_inputs
from harness.profiles import EncoderRecipe

if TYPE_CHECKING:
    import torch

# What role_site/sitecustomize.py names a tapped batch by: the sha256 of its float32 pixel values.
TAP_KEY_HEX = 16


def tap_key(pixel_values: torch.Tensor) -> str:
    data = pixel_values.detach().float().cpu().contiguous().numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:TAP_KEY_HEX]


def tapped_rows(tap_dir: Path, pixel_values: torch.Tensor) -> torch.Tensor | None:
    """The rows the encode worker's vision model returned for these pixel values, as it returned
    them (its dtype), shape (1, rows, width); None if it never encoded them here."""
    from safetensors.torch import load_file

    path = tap_dir / f"{tap_key(pixel_values)}.safetensors"
    return load_file(path)["rows"] if path.is_file() else None


def family(model_dir: str) -> str:
    return str(load_model(model_dir, "float32").config.model_type)


def encoder_features(
    model_dir: str, inputs: Any, recipe: EncoderRecipe | None = None
) -> torch.Tensor:
    """The rows the model's weights give the request's images, shape (1, rows, width), float32:
    the model's own (no recipe), or computed the way `recipe` says the encoder computes them."""
    import torch

    recipe = recipe or EncoderRecipe()
    dtype = getattr(torch, recipe.dtype)
    model = load_model(model_dir, recipe.dtype)
    pixels = inputs["pixel_values"].to(dtype)
    with torch.inference_mode():
        if family(model_dir) == "qwen3_vl":
            if recipe.features != "model":
                raise ValueError(f"{recipe.features}: not a Qwen3-VL encoder recipe")
            out = model.model.visual(pixels, grid_thw=inputs["image_grid_thw"])
            rows = torch.cat([out.pooler_output, *out.deepstack_features], dim=-1)
        elif recipe.features == "last_hidden_state":  # LLaVA: every row, CLS kept, last layer
            hidden = model.model.vision_tower(pixels).last_hidden_state
            rows = model.model.multi_modal_projector(hidden)
        else:
            found = model.model.get_image_features(pixel_values=pixels)
            found = getattr(found, "pooler_output", found)
            rows = torch.cat(list(found), dim=0) if isinstance(found, list | tuple) else found
    rows = rows.float()
    return rows.reshape(1, -1, rows.shape[-1])


def relative_rms(rows: torch.Tensor, features: torch.Tensor) -> float:
    """|rows - features| / |features| in the 2-norm (inf where the shapes differ)."""
    if tuple(rows.shape) != tuple(features.shape):
        return float("inf")
    diff = rows.float() - features.float()
    return float(diff.pow(2).sum().sqrt() / features.float().pow(2).sum().sqrt())


@contextlib.contextmanager
def image_features_replaced(model: Any, rows: torch.Tensor, pixels: torch.Tensor) -> Iterator[None]:
    """Qwen3-VL's own forward, with the features its vision tower would give the image's
    `pixels` replaced by the encoder's rows (main embeddings, then each deepstack level, side by
    side); a video's (the same method, other pixels) are the model's own."""
    width = model.config.text_config.hidden_size
    own = model.model.get_image_features

    def features(*args: Any, **kwargs: Any) -> Any:
        out = own(*args, **kwargs)
        given = kwargs.get("pixel_values", args[0] if args else None)
        if given is None or given.shape != pixels.shape or not bool((given == pixels).all()):
            return out
        parts = rows[0].float().split(width, dim=-1)
        out.pooler_output = [parts[0]]
        out.deepstack_features = list(parts[1:])
        return out

    model.model.get_image_features = features
    try:
        yield
    finally:
        del model.model.get_image_features


def reference_on_rows(
    model_dir: str,
    body: dict[str, Any],
    media: MediaFetcher,
    rows: torch.Tensor,
    kv_handoff: bool,
    stack: str = VLLM,
) -> Reference | None:
    """The model's float32 language model on the encoder's `rows`, placed as the path places them
    (module doc); greedy, `body`'s max_tokens. None where the processor cannot mirror vLLM's
    preprocessing."""
    import torch

    inputs = processor_inputs(model_dir, body["messages"], media, stack)
    if inputs is None:
        return None
    model = load_model(model_dir, "float32")
    inputs = {k: v.float() if torch.is_floating_point(v) else v for k, v in inputs.items()}
    max_tokens = int(body["max_tokens"])
    with torch.inference_mode():
        if family(model_dir) == "qwen3_vl":
            with image_features_replaced(model, rows, inputs["pixel_values"]):
                out = model.generate(
                    **inputs,
                    max_new_tokens=max_tokens,
                    do_sample=False,
                    output_logits=True,
                    return_dict_in_generate=True,
                )
            ids = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
            return Reference(ids, steps_of(ids, list(out.logits), model_dir))
        ids, logits = llava_on_rows(model, inputs, rows, max_tokens, kv_handoff)
    return Reference(ids, steps_of(ids, logits, model_dir))


def llava_on_rows(
    model: Any, inputs: Any, rows: torch.Tensor, max_tokens: int, kv_handoff: bool
) -> tuple[list[int], list[torch.Tensor]]:
    """LLaVA's language model on one image's rows, placed one per placeholder: as the E/PD worker
    runs it, or (`kv_handoff`) as E/P/D's prefill computes it and its decode worker, whose own
    prompt is the processor's, imports the KV of all but its last prompt token."""
    import torch
    from transformers import DynamicCache

    ids = inputs["input_ids"][0]
    placeholder = model.config.image_token_id
    at = (ids == placeholder).nonzero()[:, 0]
    first, count, n = int(at[0]), len(at), rows.shape[1]
    prefill_ids = torch.cat([ids[:first], ids.new_full((n,), placeholder), ids[first + count :]])
    embed = model.get_input_embeddings()
    prompt = embed(prefill_ids[None]).clone()
    prompt[0, first : first + n] = rows[0].float()
    cache = DynamicCache()
    if not kv_handoff:
        out = model(inputs_embeds=prompt, past_key_values=cache, use_cache=True)
        position = prompt.shape[1]
    else:
        model(inputs_embeds=prompt, past_key_values=cache, use_cache=True)
        own_length = len(ids)
        cache.crop(own_length - 1)
        last = embed(ids[None, -1:])
        out = model(
            inputs_embeds=last,
            past_key_values=cache,
            use_cache=True,
            position_ids=torch.tensor([[own_length - 1]]),
        )
        position = own_length
    logits = [out.logits[0, -1]]
    tokens = [int(logits[-1].argmax())]
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    while len(tokens) < max_tokens and tokens[-1] not in stops:
        out = model(
            inputs_embeds=embed(torch.tensor([[tokens[-1]]])),
            past_key_values=cache,
            use_cache=True,
            position_ids=torch.tensor([[position]]),
        )
        position += 1
        logits.append(out.logits[0, -1])
        tokens.append(int(logits[-1].argmax()))
    return tokens, logits
