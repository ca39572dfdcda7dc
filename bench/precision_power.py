"""What each CPU-tier precision's oracles catch: the smallest pixel drift, image-embedding noise and
logit noise that turn the verdict against the model's own answer, and against the engine alone,
per precision, in one run.

For each family (Qwen3-VL in float32, Qwen3.5 in bfloat16: harness/core/precision.py) it serves
the tiny checkpoint with the pinned vLLM in this process (the engine every CPU-tier worker runs),
asks the shipped image question (max_tokens 100, top-5 logprobs), and judges the answer with the
same two checks the suite runs: the text against the model's own (transformers, same dtype,
near-ties where the precision allows them) and the log-probabilities within its tolerance
(checks.compare_logprobs). Then, scale by scale, it perturbs one of:
- the image's pixels, every channel `levels` brighter (of 255) before the engine reads it, as a
  media loader that drifts would (Dynamo's image loader, the frontend's decoder);
- the vision tower's output rows (seeded Gaussian noise, `relative` x their RMS), the numbers an
  encode worker hands on;
- the logits before the log-softmax (seeded Gaussian noise, `absolute`, in nats).
and prints the smallest scale each check catches, and the clean run's largest gap (what the
tolerance is 10x of). The engine alone (harness/oracles/engine_alone.py) is this engine's own
clean answer: tokens exact, log-probabilities within its tolerance (engine_answer.py).
Usage: python bench/precision_power.py [--families qwen3_vl qwen3_5]
Run it alone: it loads one engine per family (about 20 s each on 2 cores)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the role adapter's CPU engine environment (harness/launch/role_adapter.py CPU_VLLM_ENV)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in this process
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.core.precision import family_dtype, precision_of
from harness.oracles.checks import Step, compare_logprobs
from harness.oracles.engine_answer import cpu_tolerance
from harness.oracles.model_reference import TOP_LOGPROBS, reference
from harness.payloads.media import build_media
from harness.tiny_models import build_tiny_model

PROMPT = "What colour is the square in this image? Respond with only the colour."
MAX_TOKENS = 100  # the shipped cases' default (harness/profiles/schema.py)
EMBEDDING_SCALES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
LOGIT_SCALES = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
PIXEL_LEVELS = (1, 2, 4, 8, 16, 32, 64)
SEED = 0


@dataclass
class Noise:
    """Where the hooks add noise now: `site` ("rows" or "logits") at `scale` (0: none)."""

    site: str = ""
    scale: float = 0.0


def engine(model_dir: Path, dtype: str, noise: Noise) -> Any:
    import torch
    from vllm import LLM

    llm = LLM(
        model=str(model_dir),
        dtype=dtype,
        enforce_eager=True,
        max_model_len=2048,
        kv_cache_memory_bytes=64 << 20,
        distributed_executor_backend="uni",
        allowed_local_media_path=str(model_dir.parent.parent),
        enable_prefix_caching=False,
        mm_processor_cache_gb=0,
        limit_mm_per_prompt={"image": 1, "video": 0},
    )
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model

    def noisy(site: str) -> Any:
        def hook(_module: Any, _inputs: Any, out: Any) -> Any:
            if noise.site != site or not noise.scale or not isinstance(out, torch.Tensor):
                return out
            generator = torch.Generator().manual_seed(SEED)
            z = torch.randn(out.shape, generator=generator).to(out.dtype)
            if site == "rows":
                rms = out.float().pow(2).mean().sqrt().to(out.dtype)
                return out + noise.scale * rms * z
            return out + noise.scale * z

        return hook

    vision = getattr(model, "visual", None) or model.vision_tower  # Qwen-VL's, Gemma-4's
    language = getattr(model, "language_model", model)
    logits = getattr(language, "logits_processor", None) or model.logits_processor
    vision.register_forward_hook(noisy("rows"))
    logits.register_forward_hook(noisy("logits"))
    return llm


def engine_steps(llm: Any, url: str) -> list[Step]:
    from vllm import SamplingParams

    message = {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": PROMPT},
        ],
    }
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, logprobs=TOP_LOGPROBS)
    out = llm.chat([message], params, use_tqdm=False)[0].outputs[0]
    tokenizer = llm.get_tokenizer()

    def text(token: int) -> str:  # as the reference renders a token (model_reference.py)
        return str(tokenizer.decode([token], skip_special_tokens=True))

    steps = []
    for token, top in zip(out.token_ids, out.logprobs, strict=True):
        alternatives = {text(t): lp.logprob for t, lp in top.items() if lp.rank <= TOP_LOGPROBS}
        steps.append(Step(text(token), top[token].logprob, alternatives))
    return steps


def verdict(steps: list[Step], model: list[Step], dtype: str) -> tuple[bool, bool, float | None]:
    """(text holds, logprobs hold, largest gap): the text holds where the tokens are the model's
    own, or differ first at a near-tie the precision allows."""
    precision = precision_of(dtype)
    judged = compare_logprobs(steps, model, precision.logprob_tolerance, precision.near_ties)
    same_text = [s.token for s in steps] == [s.token for s in model]
    text_holds = same_text or (judged.result.passed and judged.tie_at is not None)
    return text_holds, judged.result.passed, judged.gap


def alone_holds(steps: list[Step], alone: list[Step], dtype: str) -> bool:
    """The engine alone's check (engine_answer.py): tokens exact, logprobs within its tolerance."""
    tolerance = cpu_tolerance("dynamo-vllm", dtype)
    return compare_logprobs(steps, alone, tolerance).result.passed and len(steps) == len(alone)


def drifted(image: Path, levels: int) -> str:
    """A copy of the PNG with every channel `levels` brighter (clipped at 255), as a file URL."""
    from PIL import Image

    out = image.with_name(f"{image.stem}-plus{levels}.png")
    Image.eval(Image.open(image).convert("RGB"), lambda v: min(v + levels, 255)).save(out)
    return f"file://{out}"


def smallest_caught(
    llm: Any,
    noise: Noise,
    site: str,
    scales: tuple[float, ...],
    image: Path,
    model: list[Step],
    alone: list[Step],
    dtype: str,
) -> tuple[float | None, float | None, float | None]:
    """The smallest scale at which the text check, the logprobs check (both against the model's
    own answer), and the engine alone's check fail."""
    text_at = logprobs_at = alone_at = None
    for scale in scales:
        url = f"file://{image}"
        if site == "pixels":
            url = drifted(image, int(scale))
        else:
            noise.site, noise.scale = site, scale
        steps = engine_steps(llm, url)
        text_holds, logprobs_hold, _ = verdict(steps, model, dtype)
        if text_at is None and not text_holds:
            text_at = scale
        if logprobs_at is None and not logprobs_hold:
            logprobs_at = scale
        if alone_at is None and not alone_holds(steps, alone, dtype):
            alone_at = scale
        if None not in (text_at, logprobs_at, alone_at):
            break
    noise.site, noise.scale = "", 0.0
    return text_at, logprobs_at, alone_at


def measure(family: str) -> dict[str, Any]:
    media = build_media(build_tiny_model("qwen3_vl").parent.parent / "media")
    image = media.green_square_png
    part = {"type": "image_url", "image_url": {"url": f"http://x/{image.name}"}}
    message = {"role": "user", "content": [part, {"type": "text", "text": PROMPT}]}
    body = {"messages": [message], "max_tokens": MAX_TOKENS}
    dtype = family_dtype(family)
    model_dir = build_tiny_model(family)
    found = reference(model_dir, body, lambda _url: image.read_bytes(), dtype)
    assert found is not None
    noise = Noise()
    llm = engine(model_dir, dtype, noise)
    alone = engine_steps(llm, f"file://{image}")  # the engine's own clean answer
    again = engine_steps(llm, f"file://{image}")  # and the same asked again: it must hold
    text_holds, logprobs_hold, gap = verdict(alone, found.steps, dtype)
    steps = found.steps
    caught = {
        site: smallest_caught(llm, noise, site, scales, image, steps, alone, dtype)
        for site, scales in (
            ("pixels", PIXEL_LEVELS),
            ("rows", EMBEDDING_SCALES),
            ("logits", LOGIT_SCALES),
        )
    }
    return {
        "family": family,
        "dtype": dtype,
        "tolerance": precision_of(dtype).logprob_tolerance,
        "gap": gap,
        "clean_passes": text_holds and logprobs_hold and alone_holds(again, alone, dtype),
        **caught,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["qwen3_vl", "qwen3_5"])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one family, in its own process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return 0
    results = []
    for family in args.families:  # one engine per process: vLLM in-process holds global state
        done = subprocess.run(
            [sys.executable, __file__, "--one", family], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(f"{family}: failed\n{done.stderr[-3000:]}", file=sys.stderr)
            return 2
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        "family | dtype | tolerance | clean: largest gap | clean passes | pixel drift caught "
        "(levels: text / logprobs / engine alone) | image-row noise caught (text / logprobs / "
        "engine alone) | logit noise caught (text / logprobs / engine alone)"
    )
    for r in results:
        cells = " | ".join(
            " / ".join(str(x) for x in r[site]) for site in ("pixels", "rows", "logits")
        )
        print(
            f"{r['family']} | {r['dtype']} | {r['tolerance']:g} | {r['gap']:.3g} | "
            f"{r['clean_passes']} | {cells}"
        )
    return 0 if all(r["clean_passes"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
