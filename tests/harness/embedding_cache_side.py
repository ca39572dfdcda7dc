"""One side of the embedding-cache connector proof (test_embedding_cache_connector.py), run in
its own process: the pinned vLLM in-process on the CPU with Dynamo's
DynamoMultimodalEmbeddingCacheConnector configured as dynamo.vllm configures it
(multimodal_utils/cache_config.py), an encoder budget of one tiny Qwen3-VL image (16 tokens, as
upstream's `--max-num-batched-tokens 280` is one Gemma-4 image), and upstream's uuid pass-through
sequence (tests/utils/multimodal.py UuidPassthroughChatPayload with exercise_embedding_cache):
the image with uuid A, the same image with uuid B (which evicts A from vLLM's own encoder
cache), then uuid A alone with another prompt, which only Dynamo's CPU store can serve.
Writes JSON to OUT (vLLM logs to stdout): the third answer's token ids, or the error that ended
the engine.

Usage: python embedding_cache_side.py MODEL_DIR IMAGE_PATH OUT"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the connector in this process
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

COLOUR = "What colour is the square in this image? Respond with only the colour."
SAME_IMAGE = (
    "What colors are prominent in the same image? Respond only with the colors."  # upstream's
)
UUID = "dynamo-mm-cache-image-1"  # upstream's image_uuid
IMAGE_TOKENS = 16  # the tiny Qwen3-VL's 512x512 square (harness/tiny_models/qwen3_vl.py)


def message(text: str, url: str | None, uuid: str) -> dict:
    part = {"type": "image_url", "image_url": {"url": url} if url else None, "uuid": uuid}
    return {"role": "user", "content": [{"type": "text", "text": text}, part]}


def main() -> int:
    from vllm import LLM, SamplingParams
    from vllm.config import ECTransferConfig

    model_dir, image, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    llm = LLM(
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        kv_cache_memory_bytes=64 << 20,
        distributed_executor_backend="uni",
        allowed_local_media_path=os.path.dirname(image),
        max_num_batched_tokens=IMAGE_TOKENS,  # the encoder cache holds one image
        limit_mm_per_prompt={"image": 1, "video": 0},
        ec_transfer_config=ECTransferConfig(
            engine_id="dynamo.backend.backend.0",
            ec_role="ec_both",
            ec_connector="DynamoMultimodalEmbeddingCacheConnector",
            ec_connector_module_path=(
                "dynamo.vllm.multimodal_utils.multimodal_embedding_cache_connector"
            ),
            ec_connector_extra_config={
                "multimodal_embedding_cache_capacity_gb": 1,
                "component": "backend",
                "model_name": "tiny",
            },
        ),
    )
    greedy = SamplingParams(max_tokens=100, temperature=0)
    url = f"file://{image}"
    for text, source, uuid in ((COLOUR, url, UUID), (COLOUR, url, f"{UUID}-eviction")):
        llm.chat([message(text, source, uuid)], greedy, use_tqdm=False)
    try:
        out = llm.chat([message(SAME_IMAGE, None, UUID)], greedy, use_tqdm=False)[0]
    except Exception as exc:  # the engine's failure is this side's answer
        result: dict = {"error": f"{type(exc).__name__}: {exc}"[:600]}
    else:
        result = {"ids": list(out.outputs[0].token_ids), "prompt": len(out.prompt_token_ids)}
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
