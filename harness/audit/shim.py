"""The recording shim put in front of every engine: `$PYTHON` for the launcher under audit.

It appends its argv, pid, where its stdout goes (start_role points it at `<log dir>/ROLE.log`)
and the env vars that decide ports, devices and health, as one JSON line, then exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

RECORD_ENV = "HARNESS_AUDIT_RECORD"
KEPT_PREFIXES = ("DYN_", "VLLM_", "SGLANG_", "HARNESS_", "NIXL_", "UCX_", "ZMQ_")
KEPT_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "MODEL",
    "SERVED_MODEL_NAME",
    "LD_LIBRARY_PATH",
)

_SOURCE = """\
#!{python} -I
import json, os, sys
env = {{k: v for k, v in os.environ.items() if k.startswith({prefixes!r}) or k in {names!r}}}
try:
    stdout = os.readlink("/proc/self/fd/1")
except OSError:
    stdout = ""
line = json.dumps({{"argv": sys.argv[1:], "pid": os.getpid(), "stdout": stdout, "env": env}})
fd = os.open(os.environ[{record!r}], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (line + "\\n").encode())
os.close(fd)
"""


def write_shim(directory: Path) -> Path:
    """Write the shim as an executable file in `directory`; returns its path."""
    path = directory / "python-shim"
    path.write_text(
        _SOURCE.format(
            python=sys.executable, prefixes=KEPT_PREFIXES, names=KEPT_NAMES, record=RECORD_ENV
        )
    )
    path.chmod(0o755)
    return path
