"""Upstream Dynamo's multimodal test matrix in its shape, written here from what
shared/notes/upstream-tests.md records of its structure (our own texts, no upstream code):

- `tests/serve/multimodal_profiles/{vllm,vllm_xpu,sglang}.py`: a module-level `*_PROFILES` list of
  `MultimodalModelProfile(name, short_name, topologies={key: TopologyConfig(marks, timeout_s,
  gpu_marker, env, tests=[MmCase(suffix, payload, marks, followup_payloads)])})` and a
  `*_TOPOLOGY_SCRIPTS` map, names bound to constants, marks computed at import (`skipif` on a
  probe, a subscript of an imported table) and an unconditional `pytest.mark.skip`;
- `tests/serve/test_{sglang,trtllm}.py`: `*_configs` dicts of `SGLangConfig(name, directory,
  script_name, script_args, marks, model, env, request_payloads)` after a `**_mm_configs` spread,
  with non-multimodal and diffusion configs beside them (not part of the matrix).

Facts match this repo's catalogue except one new family, `mm_agg_newfam-1b`, that nothing here
carries; the SGLang agg ids name `agg_vision.sh` (upstream renamed `multimodal_agg.sh`)."""

from __future__ import annotations

from pathlib import Path

VLLM = """
import pytest

from dynamo.common.utils.install_media_decoders import VALIDATED_SPECS
from tests.utils.multimodal import MmCase, MultimodalModelProfile, TopologyConfig
from tests.utils.multimodal import make_image_payload, make_image_payload_b64
from tests.utils.multimodal import make_image_payload_cached_tokens, make_video_payload

_PROBE_SAYS_NO = not probe()
_VIDEO_EXPECTED = ["triangle"]
_QWEN = "Qwen/Qwen3-VL-2B-Instruct-FP8"

VLLM_TOPOLOGY_SCRIPTS: dict[str, str] = {
    "agg": "agg_multimodal.sh",
    "agg_video": "agg_multimodal.sh",
    "agg_video_nvdec": "agg_multimodal.sh",
    "agg_router": "agg_multimodal_router.sh",
    "e_pd": "disagg_multimodal_e_pd.sh",
    "epd": "disagg_multimodal_epd.sh",
    "epd_video": "disagg_multimodal_epd.sh",
    "p_d": "disagg_multimodal_p_d.sh",
}

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

SGLANG_TOPOLOGY_SCRIPTS: dict[str, str] = {
    "agg_router": "agg_multimodal_router.sh",
    "pd": "disagg_same_gpu.sh",
}

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
            "pd": TopologyConfig(
                marks=[pytest.mark.pre_merge],
                timeout_s=500,
                delayed_start=10,
                tests=[MmCase(payload=make_image_payload(["green"]))],
            ),
        },
    ),
]
"""

VLLM_XPU = """
import pytest

from tests.utils.multimodal import MmCase, MultimodalModelProfile, TopologyConfig
from tests.utils.multimodal import make_image_payload, make_image_payload_b64

_NO_KERNEL = pytest.mark.skip(reason="vLLM XPU lacks a paged decode kernel")

VLLM_TOPOLOGY_SCRIPTS: dict[str, str] = {
    "agg": "xpu/agg_multimodal_xpu.sh",
    "agg_router": "xpu/agg_multimodal_router_xpu.sh",
}

VLLM_MULTIMODAL_PROFILES: list[MultimodalModelProfile] = [
    MultimodalModelProfile(
        name="Qwen/Qwen3-VL-2B-Instruct",
        short_name="qwen3-vl-2b",
        gpu_marker="xpu_1",
        extra_vllm_args=["--block-size", "16"],
        topologies={
            "agg": TopologyConfig(
                marks=[_NO_KERNEL, pytest.mark.post_merge, pytest.mark.xpu_1],
                timeout_s=300,
                tests=[
                    MmCase(payload=make_image_payload(["green"])),
                    MmCase(suffix="b64", payload=make_image_payload_b64(["green"])),
                ],
            ),
            "agg_router": TopologyConfig(
                health_check_workers=True,
                marks=[_NO_KERNEL, pytest.mark.pre_merge, pytest.mark.xpu_2],
                gpu_marker="xpu_2",
                env={"NUM_WORKERS": "2"},
                tests=[MmCase(payload=make_image_payload(["green"]))],
            ),
        },
    ),
]
"""

TEST_SGLANG = """
import os

import pytest

from tests.serve.common import WORKSPACE_DIR
from tests.utils.engine_process import EngineConfig
from tests.utils.multimodal import make_multimodal_configs
from tests.utils.payload_builder import chat_payload, make_image_payload_b64
from tests.serve.multimodal_profiles.sglang import SGLANG_MULTIMODAL_PROFILES

sglang_dir = os.environ.get("SGLANG_DIR") or os.path.join(WORKSPACE_DIR, "examples/backends/sglang")


class SGLangConfig(EngineConfig):
    stragglers = ["SGLANG:EngineCore"]


_mm_configs = {}
for _profile in SGLANG_MULTIMODAL_PROFILES:
    _mm_configs.update(make_multimodal_configs(_profile, SGLangConfig, sglang_dir, {}))

sglang_configs = {
    **_mm_configs,
    "aggregated": SGLangConfig(
        name="aggregated",
        directory=sglang_dir,
        script_name="agg.sh",
        marks=[pytest.mark.gpu_1, pytest.mark.pre_merge],
        model="Qwen/Qwen3-0.6B",
    ),
    "multimodal_e_pd_qwen": SGLangConfig(
        name="multimodal_e_pd_qwen",
        directory=sglang_dir,
        script_name="multimodal_epd.sh",
        marks=[
            pytest.mark.multimodal,
            pytest.mark.gpu_1,
            pytest.mark.timeout(206),
            pytest.mark.pre_merge,
        ],
        model="Qwen/Qwen3-VL-2B-Instruct",
        script_args=["--model", "Qwen/Qwen3-VL-2B-Instruct", "--single-gpu"],
        timeout=360,
        env={},
        request_payloads=[chat_payload([], expected_response=["image"], max_tokens=100)],
    ),
    "multimodal_disagg_qwen": SGLangConfig(
        name="multimodal_disagg_qwen",
        directory=sglang_dir,
        script_name="multimodal_disagg.sh",
        marks=[pytest.mark.multimodal, pytest.mark.gpu_1, pytest.mark.pre_merge],
        model="Qwen/Qwen3-VL-2B-Instruct",
        script_args=["--model", "Qwen/Qwen3-VL-2B-Instruct", "--single-gpu"],
        request_payloads=[chat_payload([], expected_response=["image", "bus"])],
    ),
    "multimodal_agg_fd_qwen": SGLangConfig(
        name="multimodal_agg_fd_qwen",
        directory=sglang_dir,
        script_name="agg_vision.sh",
        marks=[pytest.mark.multimodal, pytest.mark.gpu_1, pytest.mark.post_merge],
        model="Qwen/Qwen3.5-0.8B",
        script_args=[
            "--model-path", "Qwen/Qwen3.5-0.8B", "--page-size", "1", "--frontend-decoding"
        ],
        env={"DYN_MM_ENABLE_LIBJPEG": "1"},
        request_payloads=[make_image_payload_b64(["green"])],
    ),
    "video_agg_qwen": SGLangConfig(
        name="video_agg_qwen",
        directory=sglang_dir,
        script_name="agg_vision.sh",
        marks=[pytest.mark.multimodal, pytest.mark.gpu_1, pytest.mark.post_merge],
        model="Qwen/Qwen2-VL-7B-Instruct",
        script_args=["--model-path", "Qwen/Qwen2-VL-7B-Instruct"],
        request_payloads=[chat_payload([], expected_response=["triangle"])],
    ),
    "diffusion_t2i": SGLangConfig(
        name="diffusion_t2i",
        directory=sglang_dir,
        script_name="image_diffusion.sh",
        marks=[pytest.mark.multimodal, pytest.mark.gpu_1, pytest.mark.nightly],
        model="example/Diffusion",
    ),
}
"""

TEST_TRTLLM = """
import os

import pytest

from tests.serve.common import WORKSPACE_DIR
from tests.utils.engine_process import EngineConfig
from tests.utils.payload_builder import multimodal_payload_default

trtllm_dir = os.environ.get("TRTLLM_DIR") or os.path.join(WORKSPACE_DIR, "examples/backends/trtllm")


class TRTLLMConfig(EngineConfig):
    stragglers = ["TRTLLM:EngineCore"]


trtllm_configs = {
    "epd_multimodal": TRTLLMConfig(
        name="epd_multimodal",
        directory=trtllm_dir,
        script_name="epd_multimodal_image_and_embeddings.sh",
        marks=[
            pytest.mark.gpu_1, pytest.mark.trtllm, pytest.mark.multimodal, pytest.mark.pre_merge
        ],
        model="Qwen/Qwen3-VL-2B-Instruct",
        request_payloads=[multimodal_payload_default(expected_response=["mountain"])],
    ),
    "pd_multimodal": TRTLLMConfig(
        name="pd_multimodal",
        directory=trtllm_dir,
        script_name="disagg_multimodal.sh",
        marks=[
            pytest.mark.gpu_1, pytest.mark.trtllm, pytest.mark.multimodal, pytest.mark.pre_merge
        ],
        model="Qwen/Qwen3-VL-2B-Instruct",
        health_check_workers=True,
        env={"DYN_HEALTH_CHECK_ENABLED": "true"},
        request_payloads=[multimodal_payload_default(expected_response=["mountain"])],
    ),
}
"""

# every matrix file, by its path in a checkout
MATRIX = {
    "tests/serve/multimodal_profiles/vllm.py": VLLM,
    "tests/serve/multimodal_profiles/vllm_xpu.py": VLLM_XPU,
    "tests/serve/multimodal_profiles/sglang.py": SGLANG,
    "tests/serve/test_sglang.py": TEST_SGLANG,
    "tests/serve/test_trtllm.py": TEST_TRTLLM,
}


def write_matrix(root: Path, files: dict[str, str] | None = None) -> Path:
    """The matrix files (all of MATRIX unless `files`) written into the checkout at `root`."""
    for rel, text in (MATRIX if files is None else files).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
