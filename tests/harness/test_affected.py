"""Changed files -> affected serve test ids, on the real profiles and launchers; `affected` and
`validate image` select the same ids (test_validate_checkout.py: and `validate checkout`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.__main__ import main
from harness.cli.affected import affected
from harness.profiles import Profile, Tier, load_profiles
from harness.profiles.launchers import files_used_by, referenced_files

REPO_ROOT = Path(__file__).resolve().parents[2]
EPD = "launchers/vllm/disagg_multimodal_epd.sh"


@pytest.fixture(scope="module")
def profiles() -> list[Profile]:
    return load_profiles(REPO_ROOT / "profiles", REPO_ROOT)


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    root = REPO_ROOT / "launchers"
    return {p.relative_to(REPO_ROOT).as_posix(): p.read_text() for p in root.rglob("*.sh")}


def all_ids(profiles: list[Profile]) -> set[str]:
    return {p.test_id(c) for p in profiles for c in p.cases}


def ids_run_on(tier: Tier, profiles: list[Profile]) -> set[str]:
    """The profiles' cases the tier runs: the profile has the tier, the case does not skip it."""
    return {
        p.test_id(c)
        for p in profiles
        if p.tier(tier) is not None
        for c in p.cases
        if not (c.cpu_skip if tier == "cpu" else c.gpu_skip)
    }


def listed_as_run_on(tier: Tier, table: str) -> set[str]:
    """The ids `harness affected` prints with a cadence on the tier ("id  cpu: post_merge")."""
    return {line.split()[0] for line in table.splitlines() if f"{tier}: " in line}


def selected_by_validate(err: str) -> set[str]:
    """The ids `harness validate` says it runs ("harness validate: 3 id(s) …: a, b, c")."""
    [line] = [line for line in err.splitlines() if " id(s)" in line]
    return set(line.rsplit(": ", 1)[1].split(", "))


def test_epd_launcher_lists_its_cases_and_warns(profiles: list[Profile], texts: dict) -> None:
    report = affected([EPD], profiles, texts)
    ids = {c.test_id for c in report.cases}
    assert {
        "mm_epd_qwen3-vl-2b",
        "mm_epd_qwen3-vl-2b_b64_frontend_decoding",
        "mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding",
        "mm_epd_llava-1.5-7b",
    } <= ids
    users = [p for p in profiles if EPD in (p.launcher, *files_used_by(p.launcher, texts))]
    assert ids == {p.test_id(c) for p in users for c in p.cases}
    assert "mm_xpu_epd_qwen3-vl-2b" in ids  # the XPU launcher runs the shared E/P/D one
    assert not any(i.startswith("mm_agg") or i.startswith("mm_e_pd") for i in ids)
    assert report.unmapped == []
    [warning] = report.warnings
    assert warning.startswith(f"{EPD}: changed launcher is covered only by post_merge")
    assert "no pre_merge test" in warning


def test_cadence_per_tier_leaves_out_skipped_tiers(profiles: list[Profile], texts: dict) -> None:
    cases = {c.test_id: c for c in affected([EPD], profiles, texts).cases}
    assert cases["mm_epd_qwen3-vl-2b"].cadence == {"gpu": ("post_merge",), "cpu": ("post_merge",)}
    # CPU skips it (frontend video decoding needs media-ffmpeg): only the GPU tier covers it.
    assert cases["mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding"].cadence == {
        "gpu": ("post_merge",)
    }
    assert cases["mm_epd_qwen3-vl-2b"].because == (EPD,)


def test_pre_merge_coverage_silences_the_warning(profiles: list[Profile], texts: dict) -> None:
    promoted = [
        p.model_copy(update={"marks": ["pre_merge"]}) if p.name == "epd_qwen3-vl-2b" else p
        for p in profiles
    ]
    report = affected([EPD], promoted, texts)
    assert report.warnings == []
    assert report.cases


def test_lib_file_affects_every_profile_whose_launcher_sources_it(
    profiles: list[Profile], texts: dict
) -> None:
    users = [p for p in profiles if "launchers/lib/common.sh" in files_used_by(p.launcher, texts)]
    assert {p.launcher for p in users} >= {EPD, "launchers/vllm/agg_multimodal.sh"}
    report = affected(["launchers/lib/common.sh"], profiles, texts)
    assert {c.test_id for c in report.cases} == all_ids(users)


def test_lib_file_nobody_sources_affects_nothing_and_warns(profiles: list[Profile]) -> None:
    texts = {EPD: "#!/usr/bin/env bash\necho no sources here\n"}
    report = affected(["launchers/lib/common.sh"], profiles, texts)
    assert report.cases == []
    assert report.unmapped == ["launchers/lib/common.sh"]
    assert "no profile uses" in report.warnings[0]


def test_helper_named_by_a_sourced_file_counts(profiles: list[Profile], texts: dict) -> None:
    """common.sh starts launchers/lib/zmq_broker.py by a path relative to itself."""
    report = affected(["launchers/lib/zmq_broker.py"], profiles, texts)
    assert "mm_agg_qwen3-vl-2b" in {c.test_id for c in report.cases}


def test_profile_yaml_affects_only_its_cases(profiles: list[Profile], texts: dict) -> None:
    report = affected(["profiles/vllm/agg_qwen3-vl-2b.yaml"], profiles, texts)
    agg = next(p for p in profiles if p.source.endswith("profiles/vllm/agg_qwen3-vl-2b.yaml"))
    assert {c.test_id for c in report.cases} == all_ids([agg])
    assert report.warnings == []


@pytest.mark.parametrize(
    "path",
    [
        "harness/payloads/media.py",
        "harness/launch/plan.py",
        "conftest.py",
        "pytest.ini",
        "tests/serve/test_serve.py",
    ],
)
def test_core_files_affect_everything(path: str, profiles: list[Profile], texts: dict) -> None:
    report = affected([path], profiles, texts)
    assert {c.test_id for c in report.cases} == all_ids(profiles)
    assert report.warnings == []


def test_docs_and_own_tests_affect_nothing(profiles: list[Profile], texts: dict) -> None:
    paths = ["docs/reference/contracts.md", "tests/harness/test_ports.py", "bench/gpu_makespan.py"]
    report = affected(paths, profiles, texts)
    assert report.cases == [] and report.warnings == []
    assert report.unmapped == sorted(paths)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"', "launchers/lib/common.sh"),
        ('. "$(dirname "$0")/../lib/common.sh"', "launchers/lib/common.sh"),
        ('source "${BASH_SOURCE%/*}/helpers.sh"', "launchers/vllm/helpers.sh"),
        ("source ../lib/other.sh  # comment", "launchers/lib/other.sh"),
        (
            '"$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/zmq_broker.py" 1 2',
            "launchers/vllm/zmq_broker.py",
        ),
    ],
)
def test_referenced_files_forms(line: str, expected: str) -> None:
    assert referenced_files("launchers/vllm/x.sh", line) == {expected}


def test_cli_strict_exits_1_and_warns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["affected", EPD, "--strict"]) == 1
    out, err = capsys.readouterr()
    assert "mm_epd_qwen3-vl-2b " in out and "gpu: post_merge" in out
    assert f"WARNING: {EPD}: changed launcher is covered only by post_merge" in err


def test_cli_warns_but_exits_0_without_strict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["affected", EPD, "--nodeids"]) == 0
    out, err = capsys.readouterr()
    assert "tests/serve/test_serve.py::test_serve[mm_epd_qwen3-vl-2b]" in out.splitlines()
    assert "WARNING" in err


def test_cli_rejects_base_with_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["affected", EPD, "--base", "HEAD"]) == 2
    assert "either --base REF or FILE" in capsys.readouterr().err


def test_cli_tags_upstream_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["affected", "launchers/vllm/disagg_multimodal_p_d.sh"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["mm_p_d_qwen3-vl-2b"].endswith("[upstream id]")
    assert not lines["mm_p_d_qwen3-vl-2b_b64"].endswith("[upstream id]")


@pytest.mark.parametrize("tier", ["cpu", "gpu"])
def test_affected_and_validate_image_select_the_same_ids(
    tier: Tier,
    profiles: list[Profile],
    texts: dict,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Both go through `affected()`: for a changed launcher, `validate image` runs exactly the
    ids `affected --tier` lists as run on that tier, the cases of its users the tier runs."""
    users = [p for p in profiles if EPD in (p.launcher, *files_used_by(p.launcher, texts))]
    expected = ids_run_on(tier, users)
    assert main(["affected", EPD, "--tier", tier]) == 0
    listed = listed_as_run_on(tier, capsys.readouterr().out)
    assert (
        main(
            [
                "validate",
                "image",
                "img",
                "--change",
                EPD,
                "--tier",
                tier,
                "--dry-run",
                "--results-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert listed == selected_by_validate(capsys.readouterr().err) == expected
