"""pytest-xdist's loadgroup keeps each xdist_group on one worker with the pinned pytest.

The serve suite relies on it (cases of one launch, and CPU baselines, share a worker). With
pytest 9.2 + xdist 3.8 the group marks are silently ignored; this guards the pin.
"""

import json
import subprocess
import sys
from pathlib import Path

SUITE = """
import json, os, pytest

CASES = [pytest.param(g, i, marks=pytest.mark.xdist_group(g)) for g in "abc" for i in range(4)]


@pytest.mark.parametrize("group,i", CASES)
def test_member(group, i):
    with open(os.environ["OUT"], "a") as out:
        out.write(json.dumps([group, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""


def test_each_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_groups.py").write_text(SUITE)
    out = tmp_path / "out.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-n",
        "2",
        "--dist",
        "loadgroup",
        "-p",
        "no:cacheprovider",
        str(tmp_path),
    ]
    env = {"OUT": str(out), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for line in out.read_text().splitlines():
        group, worker = json.loads(line)
        workers.setdefault(group, set()).add(worker)
    assert sorted(workers) == ["a", "b", "c"]
    assert all(len(w) == 1 for w in workers.values()), workers
