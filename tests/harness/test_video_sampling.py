"""The reference's mirrors of each engine's video sampling follow the engine they mirror: SGLang's
own `smart_nframes` / `smart_resize` (run in the CPU tier's SGLang venv) give the frames and
sizes `decode_video_like_sglang` uses, over a spread of lengths, rates and sizes, on its agg path
and on its E/PD encode server's (its own video defaults); and the decord
stand-in SGLang decodes with gives the same frames as the reference's own OpenCV decode."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.core.paths import sglang_python
from harness.oracles.media_mirror import (
    decode_video_like_sglang,
    decode_video_like_vllm,
    sglang_frame_indices,
    sglang_resized,
)
from harness.payloads.media import build_media

pytestmark = pytest.mark.skipif(
    not sglang_python().exists(), reason="no SGLang venv (scripts/bootstrap.sh builds it)"
)

VIDEOS = [(10, 5.0), (10, 10.0), (7, 3.0), (300, 30.0), (2000, 24.0), (3, 1.0), (20000, 5.0)]
SIZES = [(240, 320, 4), (1080, 1920, 4), (64, 64, 8), (720, 1280, 100), (28, 2000, 4)]

SGLANG_SIDE = """
import ast, inspect, json, sys
import numpy as np
from sglang.srt.disaggregation.encoder import preprocessor
from sglang.srt.multimodal.processors import qwen_vl as q
videos, sizes = json.loads(sys.argv[1])
# the encode server's own video defaults, as its source sets them (video_defaults = {...})
source = inspect.getsource(preprocessor)
encoder = ast.literal_eval(source[source.index("video_defaults = ") + 17 :].split("\\n")[0])
out = {"frames": [], "encode_frames": [], "sizes": [], "encoder": encoder}
for total, fps in videos:
    for key, config in (("frames", {}), ("encode_frames", dict(encoder))):
        n = q.smart_nframes(config, total_frames=total, video_fps=fps)
        out[key].append(np.unique(np.linspace(0, total - 1, num=n, dtype=np.int64)).tolist())
for h, w, n in sizes:
    high = max(min(q.VIDEO_MAX_PIXELS, q.VIDEO_TOTAL_PIXELS / n * q.FRAME_FACTOR),
               int(q.VIDEO_MIN_PIXELS * 1.05))
    out["sizes"].append(list(q.smart_resize(h, w, factor=q.IMAGE_FACTOR,
                                            min_pixels=q.VIDEO_MIN_PIXELS, max_pixels=high)))
print(json.dumps(out))
"""


def test_the_sglang_mirror_samples_and_sizes_as_sglang_does() -> None:
    run = subprocess.run(
        [str(sglang_python()), "-c", SGLANG_SIDE, json.dumps([VIDEOS, SIZES])],
        capture_output=True,
        text=True,
        timeout=300,
        env={"SGLANG_USE_CPU_ENGINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    sglang = json.loads(run.stdout.strip().splitlines()[-1])
    assert [sglang_frame_indices(t, f) for t, f in VIDEOS] == sglang["frames"]
    # the E/PD encode server's path (video_e_pd_qwen) samples with its own defaults, to the frame
    assert sglang["encoder"] == {"fps": 2.0, "max_frames": 768, "min_frames": 4}
    assert [sglang_frame_indices(t, f) for t, f in VIDEOS] == sglang["encode_frames"]
    assert [list(sglang_resized(h, w, n)) for h, w, n in SIZES] == sglang["sizes"]


def test_the_decord_stand_in_decodes_the_frames_opencv_does(tmp_path: Path) -> None:
    """What SGLang reads through the stand-in (PyAV) is what the reference decodes (OpenCV)."""
    media = build_media(tmp_path)
    script = (
        "import sys, decord, numpy as np\n"
        "vr = decord.VideoReader(sys.argv[1], ctx=decord.cpu(0))\n"
        "np.save(sys.argv[2], vr.get_batch(list(range(len(vr)))).asnumpy())\n"
        "print(vr.get_avg_fps())\n"
    )
    out = tmp_path / "frames.npy"
    run = subprocess.run(
        [str(sglang_python()), "-c", script, str(media.triangle_video_mp4), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    frames = np.load(out)
    data = media.triangle_video_mp4.read_bytes()
    sampled, metadata = decode_video_like_vllm(data)  # OpenCV, the indices vLLM samples
    assert frames.shape[0] == metadata.total_num_frames
    assert float(run.stdout.strip()) == metadata.fps
    assert np.array_equal(frames[metadata.frames_indices], sampled)
    video, sg_metadata = decode_video_like_sglang(data)
    assert sg_metadata.frames_indices.tolist() == sglang_frame_indices(len(frames), metadata.fps)
    assert tuple(video.shape[2:]) == sglang_resized(*frames.shape[1:3], video.shape[0])
