"""A stand-in for decord's CPU `VideoReader` on PyAV, for the CPU tier's SGLang venv.

SGLang 0.5.21 decodes video with torchcodec when it imports, else with decord
(sglang/srt/utils/video_decoder.py, `VideoDecoderWrapper`). torchcodec 0.15 (SGLang's pin) is
built against another torch than the CPU tier's, and neither decord nor decord2 has a wheel on
this machine's index; PyAV (FFmpeg's decoder, `av`) has one. This module gives what SGLang's
decord branch calls: `cpu(i)`, `VideoReader(path, ctx=…)`, `len`, `get_avg_fps()`,
`reader[i].asnumpy()` and `get_batch(indices).asnumpy()`, frames RGB, uint8, NHWC.
Every frame is decoded once, in order, on open (the harness's test videos are a few dozen small
frames): exact frame indices, no seeking."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import av
import numpy as np

__version__ = "0.0-harness-pyav"


class Context:
    def __init__(self, device_type: str, device_id: int) -> None:
        self.device_type, self.device_id = device_type, device_id


def cpu(device_id: int = 0) -> Context:
    return Context("cpu", device_id)


class NDArray:
    """decord's array type: what SGLang reads is `.asnumpy()`."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def asnumpy(self) -> np.ndarray:
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)


class VideoReader:
    def __init__(self, uri: str, ctx: Context | None = None, **_: Any) -> None:
        if ctx is not None and ctx.device_type != "cpu":
            raise ValueError("the harness's decord stand-in decodes on the CPU only")
        with av.open(uri) as container:
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate or Fraction(0)
            self._fps = float(rate)
            self._frames = np.stack(
                [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
            )

    def __len__(self) -> int:
        return int(self._frames.shape[0])

    def __getitem__(self, index: int) -> NDArray:
        return NDArray(self._frames[index])

    def get_avg_fps(self) -> float:
        return self._fps

    def get_batch(self, indices: Sequence[int]) -> NDArray:
        return NDArray(self._frames[np.asarray(list(indices), dtype=np.int64)])
