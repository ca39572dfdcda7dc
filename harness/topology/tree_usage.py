"""Memory and CPU of a launched process tree (`tree_rss_mib`, `tree_cpu_s`), for the results and the
benches."""

from __future__ import annotations

import contextlib

import psutil


def tree(root: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [root, *root.children(recursive=True)]
    return []


def tree_rss_mib(root: psutil.Process) -> float:
    total = 0
    for proc in tree(root):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 2**20


def tree_cpu_s(root: psutil.Process) -> float:
    """CPU seconds (user + system) the live processes of the tree have used so far."""
    total = 0.0
    for proc in tree(root):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total
