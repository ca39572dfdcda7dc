"""An answer computed outside Dynamo and vLLM: Hugging Face transformers `generate` on the same
tiny checkpoint, greedy, with the model's own chat template and processor (prompt_tokens.py).

This is the CPU tier's independent reference: a topology whose answers agree with each other but
not with the model itself (an encoder running the wrong weights in every topology) disagrees
with it. Measured on both tiny models (float16, 24-100 tokens, text, image URL/base64, video,
image+video): vLLM's aggregated answers equal it character for character, so the rule is exact
equality of the text.

Two paths, as the request travels:
- raw: the processor's pixels into the whole model (agg; video, which the prefill worker decodes;
  and Qwen-VL images through an encode worker, since HF's own vision-tower outputs fed back as
  precomputed encoder outputs answer exactly as the raw path does, measured);
- LLaVA images through Dynamo's encode worker (dynamo/vllm/multimodal_utils/encode_utils.py):
  `multi_modal_projector(vision_tower(pixels).last_hidden_state)` with the CLS row kept: one row
  more than HF's own image tokens on E/PD (its prompt_tokens_offset 1), placed as embeddings
  where the image tokens are; a path that reports HF's count takes the first rows.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.judging.prompt_tokens import MediaFetcher, load_processor, processor_inputs

# The dtype the CPU tier's engines run in (launchers/lib/common.sh engine_args, CPU branch).
CPU_ENGINE_DTYPE = "float32"
# Dynamo's LLaVA encode worker loads the model with torch_dtype=float16, whatever the engines run.
LLAVA_ENCODER_DTYPE = "float16"


@lru_cache(maxsize=4)
def load_model(model_dir: str, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    return model.eval()


def reference_answer(
    model_dir: Path | str,
    body: dict[str, Any],
    media: MediaFetcher,
    dtype: str,
    llava_encoder_offset: int | None = None,
) -> str | None:
    """The greedy answer to an OpenAI chat `body` (its messages and max_tokens), as text.
    `llava_encoder_offset`: the image travels through Dynamo's LLaVA encode worker, as HF's image
    token count + this many embedding rows per image (the path's prompt_tokens_offset).
    None where processor_inputs cannot mirror vLLM's preprocessing."""
    import torch

    inputs = processor_inputs(model_dir, body["messages"], media)
    if inputs is None:
        return None
    model = load_model(str(model_dir), dtype)
    inputs = {
        k: v.to(getattr(torch, dtype)) if torch.is_floating_point(v) else v
        for k, v in inputs.items()
    }
    with torch.inference_mode():
        if llava_encoder_offset is None:
            out = model.generate(**inputs, max_new_tokens=body["max_tokens"], do_sample=False)
            out = out[:, inputs["input_ids"].shape[1] :]
        else:
            encoder = load_model(str(model_dir), LLAVA_ENCODER_DTYPE)
            embeds, mask = llava_encoder_embeddings(model, encoder, inputs, llava_encoder_offset)
            out = model.generate(inputs_embeds=embeds, attention_mask=mask,
                                 max_new_tokens=body["max_tokens"], do_sample=False)  # fmt: skip
    return load_processor(str(model_dir)).tokenizer.decode(out[0], skip_special_tokens=True)


def llava_encoder_embeddings(
    model: Any, encoder: Any, inputs: dict[str, Any], offset: int
) -> tuple[Any, Any]:
    """Prompt embeddings with each image's token run replaced by that many + `offset` rows of
    Dynamo's LLaVA encoder output (the projector on the vision tower's last hidden state, CLS
    first)."""
    import torch

    image_token = model.config.image_token_id
    ids = inputs["input_ids"][0].tolist()
    rows = ids.count(image_token) // len(inputs["pixel_values"]) + offset
    pixels = inputs["pixel_values"].to(encoder.dtype)
    features = encoder.model.multi_modal_projector(
        encoder.model.vision_tower(pixels).last_hidden_state[:, :rows]
    )
    out_ids: list[int] = []
    i = 0
    while i < len(ids):
        if ids[i] == image_token:
            while i < len(ids) and ids[i] == image_token:
                i += 1
            out_ids += [image_token] * rows
        else:
            out_ids.append(ids[i])
            i += 1
    tensor_ids = torch.tensor([out_ids])
    embeds = model.get_input_embeddings()(tensor_ids)
    rows_out = features.reshape(-1, features.shape[-1]).to(embeds.dtype)
    embeds[0, tensor_ids[0] == image_token] = rows_out
    return embeds, torch.ones_like(tensor_ids)
