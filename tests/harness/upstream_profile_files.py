"""Multimodal profile files in upstream Dynamo's shape (tests/serve/multimodal_profiles/), written
here from what shared/notes/upstream-tests.md records of their structure: a module-level
`*_PROFILES` list of `MultimodalModelProfile(name, short_name, topologies={key:
TopologyConfig(marks, timeout_s, gpu_marker, env, tests=[MmCase(suffix, payload, marks,
followup_payloads)])})`, names bound to constants, marks computed at import (`skipif` on a
probe, a subscript of an imported table) and an unconditional `pytest.mark.skip`. Facts match
this repo's catalogue except one new family, `mm_agg_newfam-1b`, that nothing here carries."""

from __future__ import annotations

VLLM = """
import pytest

from dynamo.common.utils.install_media_decoders import VALIDATED_SPECS
from tests.utils.multimodal import MmCase, MultimodalModelProfile, TopologyConfig
from tests.utils.multimodal import make_image_payload, make_image_payload_b64
from tests.utils.multimodal import make_image_payload_cached_tokens, make_video_payload

_PROBE_SAYS_NO = not probe()
_VIDEO_EXPECTED = ["triangle"]
_QWEN = "Qwen/Qwen3-VL-2B-Instruct-FP8"

VLLM_MULTIMODAL_PROFILES: list[MultimodalModelProfile] = [
    MultimodalModelProfile(
        name=_QWEN,
        short_name="qwen3-vl-2b",
        topologies={
            "agg": TopologyConfig(
                marks=[pytest.mark.post_merge],
                timeout_s=220,
                tests=[
                    MmCase(payload=make_image_payload(["green"])),
                    MmCase(suffix="b64", payload=make_image_payload_b64(["green"])),
                ],
            ),
            "agg_video": TopologyConfig(
                marks=[pytest.mark.pre_merge, pytest.mark.installs_extra_dependencies],
                timeout_s=600,
                requested_vllm_kv_cache_bytes=1_719_075_000,
                env={"DYN_TEST_ONLY_PIP_INSTALL": VALIDATED_SPECS["opencv-python-headless"]},
                tests=[MmCase(payload=make_video_payload(_VIDEO_EXPECTED))],
            ),
            "agg_video_nvdec": TopologyConfig(
                marks=[
                    pytest.mark.post_merge,
                    pytest.mark.skipif(_PROBE_SAYS_NO, reason="no NVDEC"),
                ],
                tests=[MmCase(suffix="h264", payload=make_video_payload(_VIDEO_EXPECTED))],
            ),
            "agg_router": TopologyConfig(
                marks=[pytest.mark.post_merge],
                timeout_s=400,
                env={"SINGLE_GPU": "true"},
                tests=[
                    MmCase(
                        payload=make_image_payload_cached_tokens(
                            ["green"], require_rust_processor_init=True, min_avg_kv_hit_rate=0.9
                        )
                    )
                ],
            ),
            "epd_video": TopologyConfig(
                marks=[pytest.mark.post_merge],
                timeout_s=600,
                single_gpu=True,
                tests=[
                    MmCase(
                        suffix="mixed_frontend_decoding",
                        payload=make_video_payload(_VIDEO_EXPECTED, frontend_decoding=True),
                        followup_payloads=[
                            make_video_payload(_VIDEO_EXPECTED, frontend_decoding=True)
                        ],
                        extra_script_args=["--frontend-decoding"],
                    )
                ],
            ),
        },
    ),
    MultimodalModelProfile(
        name="llava-hf/llava-1.5-7b-hf",
        short_name="llava-1.5-7b",
        topologies={
            "epd": TopologyConfig(
                marks=[pytest.mark.post_merge],
                gpu_marker="gpu_4",
                tests=[MmCase(payload=make_image_payload(["green"]))],
            ),
            "agg_router": TopologyConfig(
                marks=[pytest.mark.post_merge, pytest.mark.skip(reason="LLaVA flake")],
                gpu_marker="gpu_2",
                tests=[
                    MmCase(
                        payload=make_image_payload_cached_tokens(["green"], min_avg_kv_hit_rate=0.9)
                    )
                ],
            ),
        },
    ),
    MultimodalModelProfile(
        name="example/NewFamily-1B",
        short_name="newfam-1b",
        topologies={
            "agg": TopologyConfig(
                marks=[pytest.mark.pre_merge],
                tests=[MmCase(payload=make_image_payload(["green"]))],
            ),
        },
    ),
]
"""

SGLANG = """
import pytest

from tests.utils.multimodal import MmCase, MultimodalModelProfile, TopologyConfig
from tests.utils.multimodal import make_image_payload_cached_tokens

SGLANG_MULTIMODAL_PROFILES: list[MultimodalModelProfile] = [
    MultimodalModelProfile(
        name="Qwen/Qwen3-VL-2B-Instruct",
        short_name="qwen3-vl-2b",
        topologies={
            "agg_router": TopologyConfig(
                marks=[pytest.mark.post_merge],
                timeout_s=400,
                tests=[
                    MmCase(
                        payload=make_image_payload_cached_tokens(
                            ["green"], require_rust_processor_init=True, min_avg_kv_hit_rate=0.9
                        )
                    )
                ],
            ),
        },
    ),
]
"""
