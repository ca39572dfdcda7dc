"""What a launcher's text says before it runs: the files it uses and the ports it reads.

`files_used_by`, `text_with_used_files`: the scripts a launcher sources or names relative to
itself, transitively (a wrapper that execs the shared E/P/D launcher, which sources common.sh, …).

`launcher_port_vars`: the ports a launcher reads, found in its own text (and the helpers it
sources), in both of upstream Dynamo's contracts and ours:

- `dyn_port PREFIX N FALLBACK` (upstream's port-isolation helper: the variable is PREFIX + N);
- `${VAR:-8081}` (upstream's launchers before it: DYN_SYSTEM_PORT1..3,
  VLLM_NIXL_SIDE_CHANNEL_PORT_<ROLE>, VLLM_ZMQ_PORT_<ROLE>, each with a fixed fallback);
- `port VAR DEFAULT` (launchers/lib/common.sh).

Every one found is leased, so no profile lists side ports. A port written as a number with no
variable to move it (`--http-port=8000`, `tcp://*:20080`, `VLLM_NIXL_SIDE_CHANNEL_PORT=20097`) can
be neither leased nor moved: `fixed_ports` names it for the audit and for `port_in_use`."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.role_contract import FRONTEND_PORT_ENV

# A path written relative to the script itself: $(dirname "${BASH_SOURCE[0]}")/x, $(dirname "$0")/x,
# ${BASH_SOURCE%/*}/x; or a plain `source x` / `. x`.
_SELF_DIR = (
    r"""(?:\$\(\s*dirname\s+"?\$\{?(?:BASH_SOURCE(?:\[0\])?|0)\}?"?\s*\)"""
    r"""|\$\{BASH_SOURCE(?:\[0\])?%/\*\})"""
)
_SELF_RELATIVE = re.compile(_SELF_DIR + r"""/([\w./-]+)""")
# upstream's: SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"; source "$SCRIPT_DIR/../common/x.sh"
_SCRIPT_DIR = re.compile(r"""\$\{?SCRIPT_DIR\}?/([\w./-]+)""")
_PLAIN_SOURCE = re.compile(r"""^\s*(?:source|\.)\s+["']?([\w./-]+)["']?\s*(?:#.*)?$""", re.M)


def referenced_files(script: str, text: str) -> set[str]:
    """Repo paths a script sources or names relative to itself.

    >>> sorted(referenced_files("launchers/vllm/agg.sh",
    ...     'source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"'))
    ['launchers/lib/common.sh']
    """
    here = posixpath.dirname(script)
    found = {m.group(1) for m in _SELF_RELATIVE.finditer(text)}
    found |= {m.group(1) for m in _PLAIN_SOURCE.finditer(text)}
    found |= {m.group(1) for m in _SCRIPT_DIR.finditer(text)}
    return {posixpath.normpath(posixpath.join(here, rel)) for rel in found}


def files_used_by(launcher: str, texts: Mapping[str, str]) -> set[str]:
    """Every file a launcher uses, transitively (a sourced common.sh that names a helper...)."""
    used: set[str] = set()
    pending = [launcher]
    while pending:
        current = pending.pop()
        for ref in referenced_files(current, texts.get(current, "")):
            if ref not in used and ref != launcher:
                used.add(ref)
                pending.append(ref)
    return used


def text_with_used_files(launcher: Path) -> str:
    """The launcher's text followed by that of every file it uses, read from disk."""
    texts: dict[str, str] = {}
    pending = [launcher.as_posix()]
    while pending:
        current = pending.pop()
        if current in texts:
            continue
        try:
            texts[current] = Path(current).read_text(errors="replace")
        except OSError:
            texts[current] = ""
        pending += sorted(referenced_files(current, texts[current]))
    return "\n".join(texts.values())


_COMMENT = re.compile(r"(^|\s)#.*$", re.M)
_DYN_PORT = re.compile(r"\bdyn_port\s+\"?([A-Z][A-Z0-9_]*)\"?\s+\"?(\d+)\"?")
_FALLBACK = re.compile(r"\$\{([A-Z][A-Z0-9_]*PORT[A-Z0-9_]*):?-\d+\}")
_OURS = re.compile(r"\bport\s+([A-Z][A-Z0-9_]*)\s+\d+")
_FIXED = (
    re.compile(r"--http-port[= ](\d+)\b"),
    re.compile(r"tcp://(?:\*|0\.0\.0\.0):(\d+)\b"),
    re.compile(r"\b([A-Z][A-Z0-9_]*PORT(?:\d+|_[A-Z0-9_]+)?)=(\d+)\b"),
)
# dynamo.frontend reads it from the environment itself (upstream's launchers pass no flag).
FRONTEND_PORT = FRONTEND_PORT_ENV


def code_of(text: str) -> str:
    """The text without shell comments (a usage line in a comment reads no port)."""
    return _COMMENT.sub(r"\1", text)


def launcher_port_vars(text: str) -> list[str]:
    """The port variables a launcher's text reads, in the order it reads them.

    >>> launcher_port_vars('P=$(dyn_port DYN_SYSTEM_PORT 2 8082) Q=${VLLM_ZMQ_PORT_DECODE:-20082}')
    ['DYN_SYSTEM_PORT2', 'VLLM_ZMQ_PORT_DECODE']
    """
    code = code_of(text)
    found: list[tuple[int, str]] = []
    found += [(m.start(), m.group(1) + m.group(2)) for m in _DYN_PORT.finditer(code)]
    found += [(m.start(), m.group(1)) for m in _FALLBACK.finditer(code)]
    found += [(m.start(), m.group(1)) for m in _OURS.finditer(code)]
    # DYN_MANAGED_PORTS, HARNESS_MANAGED_PORTS: switches, not ports
    return list(dict.fromkeys(name for _, name in sorted(found) if not name.endswith("PORTS")))


@dataclass(frozen=True)
class FixedPort:
    port: int
    where: str  # the text that binds it, e.g. "tcp://*:20080"


def fixed_ports(text: str) -> list[FixedPort]:
    """Ports a launcher writes as numbers, with nothing to move them.

    >>> [f.port for f in fixed_ports('python -m dynamo.frontend --http-port=8000 &')]
    [8000]
    """
    code = code_of(text)
    found: dict[int, FixedPort] = {}
    for pattern in _FIXED:
        for m in pattern.finditer(code):
            number = int(m.group(m.lastindex or 1))
            found.setdefault(number, FixedPort(number, m.group(0)))
    return sorted(found.values(), key=lambda f: f.port)
