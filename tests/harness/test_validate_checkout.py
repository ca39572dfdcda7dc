"""`harness validate checkout PATH --base REF`: the seed's unpatched-versus-patched table for a
Dynamo checkout, on the CPU tier in minutes, in both of upstream's port contracts: its own E/P/D
launcher, unmodified, at the base (encode worker with no health source) against its branch (with
one), for the image-URL id and the b64 + frontend-decoding id."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.core.paths import REPO_ROOT
from harness.profiles import load_profiles
from harness.report.results import load_results
from tests.harness.dynamo_checkout import (
    EPD,
    build_checkout,
    commit_all,
    epd_launcher,
    write_launcher,
)
from tests.harness.test_affected import ids_run_on, listed_as_run_on, selected_by_validate
from tests.harness.upstream_shapes import vllm_e_pd

E_PD = "examples/backends/vllm/launch/disagg_multimodal_e_pd.sh"
SRC_IDS = ["mm_epd_qwen3-vl-2b", "mm_epd_qwen3-vl-2b_b64_frontend_decoding"]
# The shipped E/P/D profile without its E/PD comparison: one launch per id and side.
CHECKOUT_PROFILES = REPO_ROOT / "tests" / "harness" / "profiles" / "checkout"


def seed_checkout(tmp_path: Path, contract: str = "dyn_port") -> Path:
    """A checkout whose last commit gives the encode worker its health source: the E/P/D
    launcher in one of upstream's port contracts, or (`e_pd`) upstream's E/PD launcher, whose
    encode worker ships without one."""
    if contract == "e_pd":
        checkout = build_checkout(tmp_path / "dynamo", shapes=True)
        write_launcher(checkout, vllm_e_pd(health_source=False), E_PD)
        commit_all(checkout, "E/PD launcher as upstream ships it (no encode health source)")
        write_launcher(checkout, vllm_e_pd(health_source=True), E_PD)
    else:
        checkout = build_checkout(tmp_path / "dynamo", health_source=False, contract=contract)
        commit_all(checkout, "E/P/D launcher (encode worker without a health source)")
        write_launcher(checkout, epd_launcher(health_source=True, contract=contract))
    commit_all(checkout, "encode worker: DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS")
    return checkout


def test_the_changed_launcher_selects_its_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout = seed_checkout(tmp_path)
    assert main(["validate", "checkout", str(checkout), "--base", "HEAD~1", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert f"{checkout} at HEAD~1 vs now: " in err
    assert all(tid in err for tid in [*SRC_IDS, "mm_epd_video_qwen3-vl-2b_mixed"])
    assert "mm_e_pd_qwen3-vl-2b" not in err  # its launcher did not change
    with pytest.raises(SystemExit, match="2"):
        main(["validate", "checkout", str(checkout)])
    assert "required: --base" in capsys.readouterr().err
    assert main(["validate", "checkout", str(tmp_path), "--base", "HEAD"]) == 2
    assert "no components/src/dynamo" in capsys.readouterr().err


def test_affected_and_validate_checkout_select_the_same_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both go through `affected(checkout=True)`: `validate checkout` runs exactly the ids
    `affected --dynamo-src --tier cpu` lists as run on the CPU tier, the CPU-tier cases of the
    profiles naming the changed launcher as their upstream one."""
    checkout = seed_checkout(tmp_path)
    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    expected = ids_run_on("cpu", [p for p in profiles if p.upstream_launcher == EPD])
    assert (
        main(["affected", "--dynamo-src", str(checkout), "--base", "HEAD~1", "--tier", "cpu"]) == 0
    )
    listed = listed_as_run_on("cpu", capsys.readouterr().out)
    assert main(["validate", "checkout", str(checkout), "--base", "HEAD~1", "--dry-run"]) == 0
    assert listed == selected_by_validate(capsys.readouterr().err) == expected


@pytest.mark.heavy
@pytest.mark.vllm
def test_the_seed_table_for_a_checkout_without_a_matrix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's table as a user gets it: the shipped profiles, a checkout in upstream's layout
    with no test matrix and no launcher for the baselines' topologies, and only a dependent id
    selected (E/P/D, judged against E/PD, judged against agg). Both baselines are pulled in on
    each side and run ours on the checkout's Python; the id reads "fixed", its comparison with
    E/PD judged (not "not judged"). The E/P/D launcher in upstream's dyn_port contract (its
    role_vars contract runs unmodified in test_upstream_shapes.py)."""
    checkout = seed_checkout(tmp_path)
    tid = SRC_IDS[0]
    out = tmp_path / "out"
    code = main(
        [
            *("validate", "checkout", str(checkout), "--base", "HEAD~1", "--ids", tid),
            *("--results-dir", str(out)),
        ]
    )
    table = capsys.readouterr().out
    print(f"\n{table}")
    assert code == 0, table
    [row] = [line for line in table.splitlines() if line.startswith(f"| {tid} | failed")]
    assert "| passed |" in row and "no_health_source: worker 'encode'" in row, row
    assert "fixed" in row, row
    for side in ("base-HEAD~1", "change"):
        rows = {r["test_id"]: r for r in load_results(out / side / "results.jsonl")}
        baselines = {i for i, r in rows.items() if r["baseline"]}
        assert baselines == {"mm_e_pd_qwen3-vl-2b", "mm_agg_qwen3-vl-2b"}, (side, rows.keys())
        assert all(rows[i]["outcome"] == "passed" for i in baselines), side
        assert all("ours, as a baseline" in (rows[i]["launcher_why"] or "") for i in baselines)
    same = [c for c in rows[tid]["checks"] if c.startswith("same as e_pd")]
    assert same and not any("not judged" in c for c in same), rows[tid]["checks"]
    assert f"| {tid} (baseline) |" not in table and "mm_e_pd_qwen3-vl-2b (baseline)" in table


@pytest.mark.heavy
@pytest.mark.vllm
def test_the_seed_table_for_upstreams_e_pd_launcher(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Upstream's E/PD launcher, whose encode worker ships with no health source, at the base;
    its branch gives it one (the shipped E/P/D profile without its comparisons: one launch a
    side)."""
    checkout = seed_checkout(tmp_path, "e_pd")
    tid = "mm_e_pd_qwen3-vl-2b"
    started = time.monotonic()
    code = main(
        [
            *("validate", "checkout", str(checkout), "--base", "HEAD~1", "--ids", tid),
            *("--profiles", str(CHECKOUT_PROFILES), "--results-dir", str(tmp_path / "out")),
            *("--", "--profiles", str(CHECKOUT_PROFILES)),
        ]
    )
    took = time.monotonic() - started
    table = capsys.readouterr().out
    print(f"\n{table}\n(validate took {took:.0f} s)")
    assert code == 0, table
    [row] = [line for line in table.splitlines() if line.startswith(f"| {tid} | failed")]
    assert "| passed |" in row and "no_health_source: worker 'encode'" in row, row
    assert "fixed" in row
    assert (tmp_path / "out" / "validation.md").read_text().strip() == table.strip()


def test_affected_maps_a_checkouts_changed_launcher_and_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`harness affected --dynamo-src PATH --base REF`: the checkout's changed E/P/D launcher ->
    the ids that run it; a changed dynamo.vllm file -> every vLLM id, no SGLang one."""
    checkout = seed_checkout(tmp_path)
    assert main(["affected", "--dynamo-src", str(checkout), "--base", "HEAD~1"]) == 0
    out = capsys.readouterr().out
    assert all(tid in out for tid in [*SRC_IDS, "mm_epd_llava-1.5-7b"]), out
    assert "mm_e_pd_qwen3-vl-2b " not in out and "mm_agg_qwen3-vl-2b " not in out, out
    changed = "components/src/dynamo/vllm/main.py"
    assert main(["affected", "--dynamo-src", str(checkout), changed]) == 0
    out = capsys.readouterr().out
    assert "mm_agg_qwen3-vl-2b " in out and "mm_sglang_" not in out, out
