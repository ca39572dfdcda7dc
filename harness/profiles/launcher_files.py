"""Which files a launcher uses: the scripts it sources or names relative to itself, transitively
(a wrapper that execs the shared E/P/D launcher, which sources common.sh, …)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from pathlib import Path

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
