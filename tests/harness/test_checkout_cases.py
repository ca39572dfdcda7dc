"""Under `--dynamo-src` a case is the checkout's case (harness/profiles/checkout_case.py): its
requests and follow-ups, their options and its environment read from the checkout's own matrix;
a payload kind or option the harness does not know is named as the case's skip reason, and in
`list --upstream --dynamo-src`, never replaced by ours in silence. Ids are keyed by stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import DynamoSource
from harness.profiles import load_profiles
from harness.report.results import load_results
from tests.harness.dynamo_checkout import build_checkout
from tests.harness.upstream_profile_files import MATRIX, SGLANG, write_matrix

PROFILES = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}
VLLM_FILE = "tests/serve/multimodal_profiles/vllm.py"
SGLANG_FILE = "tests/serve/multimodal_profiles/sglang.py"

# The checkout's newest vLLM matrix: Qwen3.5's agg id with a follow-up request ours lacks, its
# router on both stacks, Gemma-4's uuid pass-through with upstream's newest eviction option.
NEWEST_VLLM = """
import pytest

from tests.utils.multimodal import MmCase, MultimodalModelProfile, TopologyConfig
from tests.utils.multimodal import image_token_metrics_payload, make_image_payload
from tests.utils.multimodal import make_image_payload_cached_tokens
from tests.utils.multimodal import UuidPassthroughChatPayload

VLLM_TOPOLOGY_SCRIPTS: dict[str, str] = {
    "agg": "agg_multimodal.sh",
    "agg_router": "agg_multimodal_router.sh",
}

VLLM_MULTIMODAL_PROFILES: list[MultimodalModelProfile] = [
    MultimodalModelProfile(
        name="Qwen/Qwen3.5-0.8B",
        short_name="qwen3.5-0.8b",
        topologies={
            "agg": TopologyConfig(
                marks=[pytest.mark.post_merge],
                timeout_s=600,
                env={"DYN_MM_CHECKOUT_SAYS": "1"},
                tests=[
                    MmCase(
                        payload=make_image_payload(["green"]),
                        followup_payloads=[image_token_metrics_payload()],
                    ),
                ],
            ),
            "agg_router": TopologyConfig(
                marks=[pytest.mark.pre_merge],
                timeout_s=400,
                tests=[
                    MmCase(
                        payload=make_image_payload_cached_tokens(
                            ["green"], min_avg_kv_hit_rate=0.75, prompt_filler_repeats=120
                        )
                    )
                ],
            ),
        },
    ),
    MultimodalModelProfile(
        name="google/gemma-4-E2B-it",
        short_name="gemma4-e2b-it",
        topologies={
            "agg": TopologyConfig(
                marks=[pytest.mark.pre_merge],
                timeout_s=670,
                tests=[
                    MmCase(
                        suffix="uuid_passthrough",
                        payload=UuidPassthroughChatPayload(
                            exercise_embedding_cache=True, eviction_fill_count=10
                        ),
                    ),
                ],
            ),
        },
    ),
]
"""
# ... and SGLang's file defining the same router id for its own stack
NEWEST_SGLANG = SGLANG.replace(
    "SGLANG_MULTIMODAL_PROFILES: list[MultimodalModelProfile] = [",
    """SGLANG_MULTIMODAL_PROFILES: list[MultimodalModelProfile] = [
    MultimodalModelProfile(
        name="Qwen/Qwen3.5-0.8B",
        short_name="qwen3.5-0.8b",
        topologies={
            "agg_router": TopologyConfig(
                marks=[pytest.mark.pre_merge],
                tests=[
                    MmCase(
                        payload=make_image_payload_cached_tokens(
                            ["green"], min_avg_kv_hit_rate=0.7
                        )
                    )
                ],
            ),
        },
    ),""",
)


def newest(root: Path, vllm: str = NEWEST_VLLM, shapes: bool = False) -> Path:
    """A checkout in upstream's newest layout: its Python, the matrix above, and (`shapes`) the
    launchers upstream ships (its vLLM agg among them)."""
    checkout = build_checkout(root, matrix=True, shapes=shapes)
    return write_matrix(checkout, {**MATRIX, VLLM_FILE: vllm, SGLANG_FILE: NEWEST_SGLANG})


def case(name: str, suffix: str, root: Path) -> ServeCase:
    profile = PROFILES[name]
    spec = next(c for c in profile.cases if c.suffix == suffix)
    return ServeCase.of(profile, spec, "cpu", DynamoSource(root))


def test_a_case_is_run_as_the_checkout_defines_it(tmp_path: Path) -> None:
    root = newest(tmp_path / "dynamo")
    agg = case("agg_qwen3.5-0.8b", "", root)
    assert agg.defined_by.startswith("the checkout's tests/serve/multimodal_profiles/vllm.py:")
    assert [r.media for r in agg.requests] == [["image_url"], ["image_url"]]  # + its follow-up
    assert agg.requests[1].image_token_metrics
    assert agg.case.env["DYN_MM_CHECKOUT_SAYS"] == "1"  # its env, on the launch
    assert agg.launch_spec.env["DYN_MM_CHECKOUT_SAYS"] == "1"
    router = case("agg_router_qwen3.5-0.8b", "", root)
    assert router.case.cache_hit is not None and router.case.cache_hit.min_avg_hit_rate == 0.75
    uuid = case("agg_gemma4-e2b-it", "uuid_passthrough", root)
    assert uuid.requests[-1].encoder_cache_fills == 10  # its eviction option, over our 8
    assert [r.uuid for r in uuid.requests] == [
        r.uuid for r in case("agg_gemma4-e2b-it", "uuid_passthrough", tmp_path).requests
    ]  # the same sequence
    assert case("agg_qwen3-vl-2b", "", tmp_path).defined_by == "ours"  # no checkout matrix


def test_a_cached_tokens_payload_repeats_as_upstreams_factory_does(tmp_path: Path) -> None:
    """`make_image_payload_cached_tokens` sends its request three times unless the call says
    otherwise (upstream's `repeat_count=3` default): the repeats the cache-hit check judges. A
    router the checkout sends a plain image to checks no cache hit, and every case as the
    checkout defines it holds the schema (a cache-hit check with no repeat is refused)."""
    root = newest(tmp_path / "a")
    router = case("agg_router_qwen3.5-0.8b", "", root)
    assert router.case.repeat == 3 and len(router.requests) == 3
    assert router.case.cache_hit is not None
    assert router.checkout_skip is None
    twice = NEWEST_VLLM.replace(
        "min_avg_kv_hit_rate=0.75,", "min_avg_kv_hit_rate=0.75, repeat_count=2,"
    )
    assert case("agg_router_qwen3.5-0.8b", "", newest(tmp_path / "b", twice)).case.repeat == 2
    plain = NEWEST_VLLM.replace(
        """make_image_payload_cached_tokens(
                            ["green"], min_avg_kv_hit_rate=0.75, prompt_filler_repeats=120
                        )""",
        'make_image_payload(["green"])',
    )
    assert plain != NEWEST_VLLM
    sent_once = case("agg_router_qwen3.5-0.8b", "", newest(tmp_path / "c", plain))
    assert sent_once.case.repeat == 1 and sent_once.case.cache_hit is None
    assert sent_once.checkout_skip is None
    no_repeat = NEWEST_VLLM.replace(
        "min_avg_kv_hit_rate=0.75,", "min_avg_kv_hit_rate=0.75, repeat_count=1,"
    )
    refused = case("agg_router_qwen3.5-0.8b", "", newest(tmp_path / "d", no_repeat))
    assert "defines a case the harness cannot judge" in (refused.checkout_skip or "")


def test_a_checkouts_cache_options_are_judged_or_said_not_judged(tmp_path: Path) -> None:
    """`min_cached_tokens` is judged (each repeat); upstream's log-line checks the harness cannot
    judge (`require_rust_processor_init`, ...) are said in the result, never passed in silence."""
    options = NEWEST_VLLM.replace(
        "min_avg_kv_hit_rate=0.75,",
        "min_avg_kv_hit_rate=0.75, min_cached_tokens=5, require_rust_processor_init=True,",
    )
    assert options != NEWEST_VLLM
    router = case("agg_router_qwen3.5-0.8b", "", newest(tmp_path / "a", options))
    assert router.checkout_skip is None
    assert router.case.cache_hit is not None and router.case.cache_hit.min_cached_tokens == 5
    assert len(router.case.unjudged) == 1
    assert router.case.unjudged[0].startswith("the checkout's require_rust_processor_init: ")
    plain = case("agg_router_qwen3.5-0.8b", "", newest(tmp_path / "b"))
    assert plain.case.unjudged == [] and plain.case.cache_hit is not None
    assert plain.case.cache_hit.min_cached_tokens == 0


def test_a_kind_or_option_the_harness_does_not_know_is_named_never_replaced(
    tmp_path: Path,
) -> None:
    unknown_kind = NEWEST_VLLM.replace(
        "followup_payloads=[image_token_metrics_payload()]",
        "followup_payloads=[make_two_image_order_payload(['green', 'red'])]",
    )
    sc = case("agg_qwen3.5-0.8b", "", newest(tmp_path / "a", unknown_kind))
    reason = sc.skip_reason(None)
    assert reason is not None and "make_two_image_order_payload(...) payload" in reason, reason
    assert "tests/serve/multimodal_profiles/vllm.py:" in reason
    unknown_option = NEWEST_VLLM.replace(
        "prompt_filler_repeats=120", "prompt_filler_repeats=120, shuffle_images=True"
    )
    sc = case("agg_router_qwen3.5-0.8b", "", newest(tmp_path / "b", unknown_option))
    assert "the option(s) shuffle_images" in (sc.skip_reason(None) or "")


def list_upstream(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "list", "--upstream", "--dynamo-src", str(root)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_list_upstream_accounts_for_a_checkout_it_can_run_as_defined(tmp_path: Path) -> None:
    """Exit 0: every id it can run as the checkout defines it (the follow-up, the options, the
    router id on both stacks keyed by its stack); a kind it does not know: exit 1, named."""
    run = list_upstream(newest(tmp_path / "a"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "unaccounted 0" in run.stdout
    assert "stack dynamo-vllm, upstream dynamo-sglang" not in run.stdout
    row = next(
        line
        for line in run.stdout.splitlines()
        if line.startswith("| `mm_agg_router_qwen3.5-0.8b` | sglang")
    )
    assert "not carried on SGLang" in row, row
    unknown = NEWEST_VLLM.replace(
        "followup_payloads=[image_token_metrics_payload()]",
        "followup_payloads=[make_two_image_order_payload(['green', 'red'])]",
    )
    run = list_upstream(newest(tmp_path / "b", unknown))
    assert run.returncode == 1
    assert "cannot run as the checkout defines it" in run.stdout
    assert "make_two_image_order_payload" in run.stdout


@pytest.mark.heavy
@pytest.mark.vllm
def test_the_suite_runs_the_checkouts_case_with_its_follow_up(tmp_path: Path) -> None:
    """The Qwen3.5 agg case on the checkout's own launcher, with the follow-up request its
    matrix adds: both requests answered and judged (the image-token metrics of each)."""
    root = newest(tmp_path / "dynamo", shapes=True)
    results = tmp_path / "results.jsonl"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "tests/serve", "-p", "no:cacheprovider", "-q"),
            *("--tier", "cpu", "--dynamo-src", str(root), "--ids", "mm_agg_qwen3.5-0.8b"),
            *("--results", str(results)),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    rows = {r["test_id"]: r for r in load_results(results)}
    row = rows["mm_agg_qwen3.5-0.8b"]
    assert row["outcome"] == "passed", row["message"] + run.stdout[-3000:]
    assert row["defined_by"].startswith("the checkout's tests/serve/multimodal_profiles/vllm.py")
    metrics = [c for c in row["checks"] if "image tokens" in c or "image-token" in c]
    assert len(metrics) == 2, row["checks"]  # its own request's and the follow-up's
