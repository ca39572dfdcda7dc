"""`harness validate`: its three modes and their options, which ids a change runs, how the two
runs' results become one table, and its argument errors (the real two-run recipe of `validate
image` is in test_docker_image.py, of `validate checkout` in test_validate_checkout.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.cli.main import CliError, build_parser, main
from harness.cli.serve_runs import first_sentence
from harness.cli.validate_image import (
    Change,
    image_ids,
    parse_change,
    render_image,
    side_results,
)
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause
from tests.harness.test_report import make_result, write_jsonl

EPD = "launchers/vllm/disagg_multimodal_epd.sh"


def validate_args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["validate", "image", "img", "--change", EPD, *extra])


def test_a_change_in_the_checkout_replaces_its_own_path() -> None:
    change = parse_change(EPD, "/workspace")
    assert change == Change(REPO_ROOT / EPD, EPD)


def test_a_copy_elsewhere_names_the_path_it_replaces(tmp_path: Path) -> None:
    copy = tmp_path / "epd.sh"
    copy.write_text("#!/usr/bin/env bash\n")
    assert parse_change(f"{copy}:{EPD}", "/workspace") == Change(copy, EPD)
    with pytest.raises(CliError, match=r"--change .* outside the repo .* give SRC:DST"):
        parse_change(str(copy), "/workspace")
    with pytest.raises(CliError, match=r"launchers/vllm/nope.sh is not a file of this checkout"):
        parse_change(f"{copy}:launchers/vllm/nope.sh", "/workspace")
    with pytest.raises(CliError, match="is a directory"):
        parse_change(f"{tmp_path}:{EPD}", "/workspace")


def test_a_copy_that_lost_the_exec_bit_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "epd.sh"
    copy.write_text("#!/usr/bin/env bash\n")
    copy.chmod(0o644)
    parse_change(f"{copy}:{EPD}", "/workspace")
    assert "is not executable and launchers/vllm/disagg_multimodal_epd.sh is" in (
        capsys.readouterr().err
    )
    copy.chmod(0o755)
    parse_change(f"{copy}:{EPD}", "/workspace")
    assert capsys.readouterr().err == ""


def test_the_ids_are_the_tiers_affected_ones() -> None:
    args = validate_args()
    change = [Change(REPO_ROOT / EPD, EPD)]
    cpu = image_ids(args, change, "cpu")
    gpu = image_ids(args, change, "gpu")
    assert "mm_epd_qwen3-vl-2b" in cpu and "mm_epd_llava-1.5-7b" in cpu
    # GPU-only cases (frontend video decoding) are not run on the CPU tier; the XPU profile has a
    # CPU tier (a checkout's XPU launcher runs there; without one it skips, saying why)
    assert set(gpu) - set(cpu) == {"mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding"}
    assert all("epd" in test_id for test_id in cpu)


def test_ids_narrow_the_selection_and_must_be_affected() -> None:
    change = [Change(REPO_ROOT / EPD, EPD)]
    args = validate_args("--ids", "mm_epd_qwen3-vl-2b, mm_epd_llava-1.5-7b")
    assert image_ids(args, change, "cpu") == ["mm_epd_qwen3-vl-2b", "mm_epd_llava-1.5-7b"]
    with pytest.raises(CliError, match=r"--ids: mm_agg_qwen3-vl-2b not affected by .*epd"):
        image_ids(validate_args("--ids", "mm_agg_qwen3-vl-2b"), change, "cpu")


def test_a_file_no_case_runs_is_refused() -> None:
    readme = [Change(REPO_ROOT / "README.md", "README.md")]
    with pytest.raises(CliError, match=r"no serve case of the cpu tier runs README\.md"):
        image_ids(validate_args(), readme, "cpu")


def test_each_side_says_which_launcher_copy_ran_and_what_was_seen(tmp_path: Path) -> None:
    changed = [Change(tmp_path / "epd.sh", EPD)]
    failing = make_result(
        "mm_epd_qwen3-vl-2b",
        "failed",
        Cause.NO_HEALTH_SOURCE,
        launcher=EPD,
        message="encode: /health answered 503 for 30.0 s. Registered at 2.0 s\nmore detail",
    )
    baseline = make_result("mm_e_pd_qwen3-vl-2b", launcher="launchers/vllm/e_pd.sh")
    write_jsonl(tmp_path / "results.jsonl", [baseline, failing])
    rows = side_results(tmp_path, "changed", changed)
    assert [r["launcher"] for r in rows] == [
        "launchers/vllm/e_pd.sh (unchanged, changed run)",
        f"{EPD} (changed)",
    ]
    assert rows[1]["cause"] == "no_health_source: encode: /health answered 503 for 30.0 s."
    assert rows[0]["cause"] is None
    assert side_results(tmp_path / "nothing-written", "as shipped", changed) == []


def test_a_long_message_is_cut_to_one_cell() -> None:
    assert first_sentence("x" * 300 + ". more") == "x" * 159 + "…"
    assert first_sentence("no stop here\nsecond line") == "no stop here"


def test_the_table_has_both_runs_and_their_exit_and_wall_time(tmp_path: Path) -> None:
    copy = tmp_path / "epd.sh"
    copy.write_text("x")
    changes = [Change(copy, EPD)]
    rows = {
        "as shipped": [make_result("mm_epd_qwen3-vl-2b", launcher=f"{EPD} (as shipped)")],
        "changed": [make_result("mm_epd_qwen3-vl-2b", "failed", launcher=f"{EPD} (changed)")],
    }
    runs = [("as shipped", 0, 61.2), ("changed", 1, 48.9)]
    text = render_image(validate_args(), changes, rows, runs)
    assert f"| mm_epd_qwen3-vl-2b | {EPD} (as shipped) | cpu | passed |" in text
    assert f"| mm_epd_qwen3-vl-2b | {EPD} (changed) | cpu | failed | wrong_answer |" in text
    compared = text.replace("|  |", "| |")
    assert "| mm_epd_qwen3-vl-2b | passed | failed | | wrong_answer |" in compared
    assert "regressed" in text
    assert "| as shipped | 0 | 61 s |" in text and "| changed | 1 | 49 s |" in text
    assert "sha256 2d711642b726" in text  # of "x": the table names the exact copy that ran


def test_dry_run_prints_both_containers_without_a_daemon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "epd.sh"
    copy.write_text("#!/usr/bin/env bash\n")
    code = main(
        [
            "validate",
            "image",
            "img",
            "--change",
            f"{copy}:{EPD}",
            "--dry-run",
            "--ids",
            "mm_epd_qwen3-vl-2b",
            "--results-dir",
            str(tmp_path / "v"),
            "--",
            "-x",
            "--ids",
            "not-ours",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0
    shipped, changed = err.split("serve-harness validate: changed run")
    assert f"{copy}:/workspace/{EPD}:ro" not in shipped
    assert f"{copy}:/workspace/{EPD}:ro" in changed
    # baselines pulled in; what follows `--` reaches pytest as given, after the selection
    selection = "pytest tests/serve --ids mm_epd_qwen3-vl-2b -x --ids not-ours --results"
    assert selection in shipped and selection in changed
    assert f"{tmp_path / 'v' / 'as-shipped'}:/results" in shipped


def test_a_patch_runs_here_on_the_ids_its_declared_defect_covers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`validate patch` needs no image: the ids are those whose declared upstream defect is
    rooted in a file the patch touches."""
    patch = REPO_ROOT / "docs" / "patches" / "dynamo-1.6.1-llava-encoder-feature-layer.patch"
    if not (Path(__import__("sysconfig").get_paths()["purelib"]) / "dynamo" / "vllm").is_dir():
        pytest.skip("needs the CPU-tier venv (ai-dynamo installed)")
    assert main(["validate", "patch", str(patch), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "4 id(s), installed vs dynamo-1.6.1-llava-encoder-feature-layer.patch" in err
    assert "mm_epd_llava-1.5-7b_b64_frontend_decoding" in err


def test_a_mode_is_required_and_each_has_its_own_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit, match="2"):
        main(["validate"])
    assert "required: MODE" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        main(["validate", "image", "img"])
    assert "required: --change" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        main(["validate", "patch", "fix.patch", "--image", "x"])
    assert "unrecognized arguments: --image x" in capsys.readouterr().err
    assert main(["validate", "patch", str(REPO_ROOT / "nope.patch")]) == 2
    assert "nope.patch: no such file" in capsys.readouterr().err
    container = ("--gpus", "--workdir", "--hf-cache", "--python", "--change", "--tier")
    helps = {}
    for mode in ("patch", "checkout", "image"):
        with pytest.raises(SystemExit, match="0"):
            main(["validate", mode, "--help"])
        helps[mode] = capsys.readouterr().out
        assert "[-- PYTEST_ARGS]" in helps[mode]
    assert all(option in helps["image"] for option in container)
    assert not any(option in helps[m] for m in ("patch", "checkout") for option in container)
    assert "--base REF" in helps["checkout"]
    assert "--base" not in helps["patch"] and "--base" not in helps["image"]
    # each mode's description is its own part of the story, not the others'
    assert "site-packages paths" in helps["patch"] and "site-packages" not in helps["image"]
    assert "as shipped" in helps["image"] and "as shipped" not in helps["checkout"]
