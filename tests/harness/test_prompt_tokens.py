"""The prompt-token oracle, offline: media tokens come from the model's own processor."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from harness.oracles.media_mirror import decode_video_like_vllm, qwen3_vl_frame_indices
from harness.oracles.processor import expected_prompt_tokens, load_processor, split_messages
from harness.tiny_models import build_tiny_model

PROMPT = {"type": "text", "text": "Describe what you see in one short sentence."}


@pytest.fixture(scope="module")
def qwen_dir() -> Path:
    return build_tiny_model("qwen3_vl")


@pytest.fixture(scope="module")
def llava_dir() -> Path:
    return build_tiny_model("llava")


@pytest.fixture(scope="module")
def png() -> bytes:
    image = Image.new("RGB", (512, 512), "white")
    ImageDraw.Draw(image).rectangle([128, 128, 383, 383], fill=(0, 160, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def make_mp4(path: Path, frames: int, fps: float) -> bytes:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (320, 240))
    for i in range(frames):
        frame = np.full((240, 320, 3), 255, np.uint8)
        cv2.rectangle(frame, (10 + 8 * i, 80), (70 + 8 * i, 140), (0, 160, 0), -1)
        writer.write(frame)
    writer.release()
    return path.read_bytes()


@pytest.fixture(scope="module")
def mp4(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return make_mp4(tmp_path_factory.mktemp("video") / "clip.mp4", frames=10, fps=10)


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def video_part(url: str) -> dict:
    return {"type": "video_url", "video_url": {"url": url}}


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def user(*parts: dict) -> list[dict]:
    system = {"role": "system", "content": "You are terse."}
    return [system, {"role": "user", "content": list(parts)}]


def text_only_prompt_tokens(model_dir: Path, messages: list[dict]) -> int:
    """Prompt tokens for the same `messages` with every image / video part removed."""
    processor = load_processor(str(Path(model_dir)))
    chat, _, _ = split_messages(messages, keep_media=False)
    prompt = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    return len(processor.tokenizer(prompt, add_special_tokens=False)["input_ids"])


def media_tokens(model_dir: Path, messages: list[dict]) -> int:
    """What the media parts add over the same messages without them."""
    with_media = expected_prompt_tokens(model_dir, messages)
    assert with_media is not None
    return with_media - text_only_prompt_tokens(model_dir, messages)


def test_text_only_request_counts_the_same_both_ways(qwen_dir: Path, llava_dir: Path) -> None:
    for model_dir in (qwen_dir, llava_dir):
        messages = user(PROMPT)
        count = expected_prompt_tokens(model_dir, messages)
        assert count == text_only_prompt_tokens(model_dir, messages)
        assert count is not None and count > 10


def test_qwen_image_adds_the_processors_image_tokens(qwen_dir: Path, png: bytes) -> None:
    processor = load_processor(str(qwen_dir))
    grid = processor.image_processor(images=[Image.open(io.BytesIO(png))])["image_grid_thw"][0]
    image_tokens = int(np.prod(grid.tolist())) // processor.image_processor.merge_size**2
    assert image_tokens == 16  # 512x512 -> 128x128 -> 8x8 patches -> 2x2 merge
    messages = user(image_part(data_url("image/png", png)), PROMPT)
    added = media_tokens(qwen_dir, messages)
    assert added == image_tokens + 2  # + <|vision_start|> <|vision_end|>


def test_llava_image_adds_the_processors_image_tokens(llava_dir: Path, png: bytes) -> None:
    processor = load_processor(str(llava_dir))
    pixels = processor.image_processor(images=[Image.open(io.BytesIO(png))])["pixel_values"][0]
    image_tokens = (pixels.shape[-1] // processor.patch_size) ** 2
    assert image_tokens == 64
    messages = user(image_part(data_url("image/png", png)), PROMPT)
    added = media_tokens(llava_dir, messages)
    newline = len(processor.tokenizer("\n", add_special_tokens=False)["input_ids"])
    assert added == image_tokens + newline  # the template writes "<image>\n"


def test_image_by_url_base64_and_file_count_the_same(
    qwen_dir: Path, png: bytes, tmp_path: Path
) -> None:
    (tmp_path / "square.png").write_bytes(png)
    fetched: list[str] = []

    def media(url: str) -> bytes:
        fetched.append(url)
        return png

    http_url = "http://127.0.0.1:9/square.png"
    counts = {
        expected_prompt_tokens(qwen_dir, user(image_part(url), PROMPT), media)
        for url in (http_url, data_url("image/png", png), f"file://{tmp_path}/square.png")
    }
    assert len(counts) == 1
    assert fetched == [http_url]


def test_two_images_add_twice_as_many(qwen_dir: Path, png: bytes) -> None:
    url = data_url("image/png", png)
    base = text_only_prompt_tokens(qwen_dir, user(PROMPT))
    one = expected_prompt_tokens(qwen_dir, user(image_part(url), PROMPT))
    two = expected_prompt_tokens(qwen_dir, user(image_part(url), PROMPT, image_part(url)))
    assert two - base == 2 * (one - base)


def test_video_frames_are_sampled_as_vllm_qwen3_vl_loader_does(mp4: bytes, tmp_path: Path) -> None:
    frames, metadata = decode_video_like_vllm(mp4)
    # 10 frames at 10 fps: int(1 s * 2 fps) = 2, raised to min_frames 4 -> linspace(0, 9, 4)
    assert metadata.frames_indices == [0, 3, 6, 9]
    assert frames.shape == (4, 240, 320, 3)
    longer = make_mp4(tmp_path / "long.mp4", frames=30, fps=10)
    assert decode_video_like_vllm(longer)[1].frames_indices == [0, 6, 12, 17, 23, 29]
    assert qwen3_vl_frame_indices(3, 30.0) == [0, 1, 2]  # never more than the video has
    assert len(qwen3_vl_frame_indices(100_000, 30.0)) == 768  # max_frames cap


def test_video_sampling_matches_vllms_own_loader(mp4: bytes) -> None:
    video = pytest.importorskip("vllm.multimodal.video")
    frames, metadata = video.Qwen3VLVideoBackend.load_bytes(mp4, num_frames=32)
    ours, our_metadata = decode_video_like_vllm(mp4)
    assert our_metadata.frames_indices == metadata["frames_indices"]
    assert our_metadata.fps == metadata["fps"]
    assert np.array_equal(ours, frames)


def test_qwen_video_adds_tokens_per_temporal_group(qwen_dir: Path, mp4: bytes) -> None:
    processor = load_processor(str(qwen_dir))
    frames, metadata = decode_video_like_vllm(mp4)
    grid = processor.video_processor(
        videos=[frames], video_metadata=[metadata], do_sample_frames=False
    )["video_grid_thw"][0].tolist()
    assert grid[0] == 2  # 4 frames / temporal patch 2
    per_group = grid[1] * grid[2] // processor.video_processor.merge_size**2
    messages = user(video_part(data_url("video/mp4", mp4)), PROMPT)
    added = media_tokens(qwen_dir, messages)
    # the template's <|vision_start|><|video_pad|><|vision_end|> keeps its outer pair; the pad
    # becomes, per group: "<t seconds>" text + <|vision_start|> + pads + <|vision_end|>
    stamps = sum(
        len(processor.tokenizer(f"<{t:.1f} seconds>", add_special_tokens=False)["input_ids"])
        for t in (0.15, 0.75)  # frames 0,3 and 6,9 at 10 fps, averaged per group
    )
    assert added == 2 + grid[0] * (per_group + 2) + stamps


def test_image_plus_video_is_the_sum(qwen_dir: Path, png: bytes, mp4: bytes) -> None:
    image, video = image_part(data_url("image/png", png)), video_part(data_url("video/mp4", mp4))
    base = text_only_prompt_tokens(qwen_dir, user(PROMPT))
    with_image = expected_prompt_tokens(qwen_dir, user(image, PROMPT)) - base
    with_video = expected_prompt_tokens(qwen_dir, user(video, PROMPT)) - base
    both = expected_prompt_tokens(qwen_dir, user(image, video, PROMPT)) - base
    assert both == with_image + with_video


def test_llava_rejects_video_like_vllm(llava_dir: Path, mp4: bytes) -> None:
    with pytest.raises(ValueError, match="takes no video"):
        expected_prompt_tokens(llava_dir, user(video_part(data_url("video/mp4", mp4)), PROMPT))


def test_http_url_without_fetcher_is_a_clear_error(qwen_dir: Path) -> None:
    with pytest.raises(ValueError, match="no media fetcher"):
        expected_prompt_tokens(qwen_dir, user(image_part("http://127.0.0.1:9/x.png"), PROMPT))
