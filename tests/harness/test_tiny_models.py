"""Tiny checkpoints: deterministic bytes, built once under a lock, shapes the CPU engine accepts."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest
from safetensors import safe_open
from transformers import AutoTokenizer

import harness.tiny_models as build_module
from harness.tiny_models import BUILDERS, build_tiny_model, default_cache_dir


def file_digests(model_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model_dir.iterdir()}


@pytest.fixture(scope="module")
def model_dirs() -> dict[str, Path]:
    return {family: build_tiny_model(family) for family in tuple(BUILDERS)}


@pytest.mark.parametrize("family", tuple(BUILDERS))
def test_two_fresh_builds_have_identical_bytes(family: str, tmp_path: Path) -> None:
    first = build_tiny_model(family, tmp_path / "a")
    second = build_tiny_model(family, tmp_path / "b")
    assert first.name == second.name
    digests = file_digests(first)
    assert digests == file_digests(second)
    expected = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}
    expected |= {"tokenizer_config.json", "processor_config.json", "chat_template.jinja"}
    expected |= {"preprocessor_config.json"}  # as the real repo ships it (Dynamo's mm-routing)
    if family != "llava":
        expected |= {"video_preprocessor_config.json"}
    assert expected <= digests.keys()


def test_cached_model_is_reused_not_rebuilt(tmp_path: Path) -> None:
    model_dir = build_tiny_model("llava", tmp_path)
    before = (model_dir / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model("llava", tmp_path) == model_dir
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_parallel_callers_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    gate = threading.Barrier(4)

    def slow_builder(out_dir: Path, seed: int) -> None:
        calls.append(out_dir)
        (out_dir / "config.json").write_text("{}")

    monkeypatch.setitem(build_module.BUILDERS, "llava", slow_builder)
    results: list[Path] = []

    def worker() -> None:
        gate.wait()
        results.append(build_tiny_model("llava", tmp_path))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(set(results)) == 1 and len(results) == 4
    assert (results[0] / "config.json").read_text() == "{}"


def test_failed_build_leaves_no_model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_builder(out_dir: Path, seed: int) -> None:
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("boom")

    monkeypatch.setitem(build_module.BUILDERS, "qwen3_vl", broken_builder)
    with pytest.raises(RuntimeError, match="boom"):
        build_tiny_model("qwen3_vl", tmp_path)
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []


def test_unknown_family_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="qwen3_vl"):
        build_tiny_model("gemma3", tmp_path)


def test_cache_dir_follows_harness_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "models"


# (hidden, layers, heads, KV heads, head dim) per family. Qwen3.5: three Gated DeltaNet layers
# and a full one, whose CPU kernels take head dim 64; Gemma-4: two blocks of four sliding and one
# full layer (the full layers' head 128, its global_head_dim).
TEXT_SHAPES = {"qwen3_5": (128, 4, 4, 2, 64), "gemma4": (64, 10, 2, 1, 64)}
CPU_ATTENTION_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256}  # vLLM 0.31 cpu_attn.py


@pytest.mark.parametrize("family", tuple(BUILDERS))
def test_text_model_shape_fits_cpu_attention(family: str, model_dirs: dict[str, Path]) -> None:
    config = json.loads((model_dirs[family] / "config.json").read_text())
    text = config["text_config"]
    head_dim = text.get("head_dim", text["hidden_size"] // text["num_attention_heads"])
    shape = (text["hidden_size"], text["num_hidden_layers"], text["num_attention_heads"])
    shape += (text["num_key_value_heads"], head_dim)
    assert shape == TEXT_SHAPES.get(family, (128, 2, 4, 2, 32))
    assert {head_dim, text.get("global_head_dim", head_dim)} <= CPU_ATTENTION_HEAD_SIZES
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[family])
    assert text["vocab_size"] == len(tokenizer) == 1024


def test_qwen3_vl_config_constraints(model_dirs: dict[str, Path]) -> None:
    config = json.loads((model_dirs["qwen3_vl"] / "config.json").read_text())
    assert config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    text, vision = config["text_config"], config["vision_config"]
    assert sum(text["rope_parameters"]["mrope_section"]) == text["head_dim"] // 2
    assert (vision["depth"], vision["hidden_size"]) == (2, 64)
    assert vision["out_hidden_size"] == text["hidden_size"]
    assert max(vision["deepstack_visual_indexes"]) < vision["depth"]
    tokenizer = AutoTokenizer.from_pretrained(model_dirs["qwen3_vl"])
    ids = tokenizer.convert_tokens_to_ids(
        ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    )
    keys = ["vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"]
    assert ids == [config[key] for key in keys]
    assert tokenizer.convert_ids_to_tokens(list(range(3))) == [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
    ]


def test_llava_config_and_weight_layout(model_dirs: dict[str, Path]) -> None:
    model_dir = model_dirs["llava"]
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlavaForConditionalGeneration"]
    vision = config["vision_config"]
    assert (vision["num_hidden_layers"], vision["hidden_size"]) == (2, 64)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.convert_tokens_to_ids("<image>") == config["image_token_index"]
    with safe_open(model_dir / "model.safetensors", "pt") as weights:
        tower = [k for k in weights.keys() if k.startswith("vision_tower.")]  # noqa: SIM118
    assert tower
    assert all(k.startswith("vision_tower.vision_model.") for k in tower)
    assert "vision_tower.vision_model.embeddings.patch_embedding.weight" in tower


@pytest.mark.parametrize(
    ("family", "needle"),
    [
        ("qwen3_vl", "<|vision_start|><|image_pad|><|vision_end|>"),
        ("qwen2_vl", "<|vision_start|><|image_pad|><|vision_end|>"),
        ("qwen2_5_vl", "<|vision_start|><|image_pad|><|vision_end|>"),
        ("llava", "USER: <image>\n"),
    ],
)
def test_chat_template_places_image_like_the_real_model(
    family: str, needle: str, model_dirs: dict[str, Path]
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[family])
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert needle in prompt
    assert prompt.endswith("ASSISTANT:" if family == "llava" else "<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "family", ["qwen3_vl", "qwen2_vl", "qwen2_5_vl", "llava", "qwen3_5", "gemma4"]
)
def test_the_image_shapes_the_models_answer(family: str, model_dirs: dict[str, Path]) -> None:
    """Each family's greedy answer depends on the image (the output-equality and other-media
    checks could not fail otherwise), and its processor places the image tokens the CPU
    profiles are written for (for the 512x512 square: 16 for Qwen3-VL, 324 for Qwen2-VL and
    Qwen2.5-VL at their real pixel bounds, 64 for LLaVA)."""
    from harness.core.precision import family_dtype
    from harness.oracles.model_reference import reference_answer
    from harness.oracles.processor import processor_counts
    from harness.payloads.media import build_media

    media = build_media(model_dirs[family].parent.parent / "media-test")
    files = {"green": media.green_square_png, "red": media.red_square_png}

    def body(colour: str) -> dict:
        part = {"type": "image_url", "image_url": {"url": f"http://x/{files[colour].name}"}}
        prompt = "What colour is the square in this image? Respond with only the colour."
        text = {"type": "text", "text": prompt}  # as the shipped profiles ask
        return {"messages": [{"role": "user", "content": [part, text]}], "max_tokens": 100}

    def fetch(url: str) -> bytes:
        return next(f for f in files.values() if url.endswith(f.name)).read_bytes()

    d = model_dirs[family]
    dtype = json.loads((d / "config.json").read_text())["dtype"]  # as transformers saved it
    assert dtype == family_dtype(family)  # saved in the family's precision (core/precision.py)
    answers = {c: reference_answer(d, body(c), fetch, dtype) for c in files}
    assert answers["green"] != answers["red"], answers
    counts = processor_counts(d, body("green")["messages"], fetch)
    wanted = {"llava": 64, "qwen3_vl": 16, "qwen3_5": 16, "qwen2_vl": 324, "qwen2_5_vl": 324}
    wanted |= {"gemma4": 256}  # 512x512 -> 48x48 patches, 3x3 pooled
    wanted = wanted[family]
    assert counts is not None and counts.images == wanted
