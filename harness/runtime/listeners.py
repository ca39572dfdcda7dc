"""Who listens on a set of ports: for the pre-launch squat check and the teardown check."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

import psutil


def listeners(ports: Iterable[int]) -> dict[int, int | None]:
    """port -> pid (None if unknown) for each of these ports in LISTEN state."""
    wanted = set(ports)
    found: dict[int, int | None] = {}
    with contextlib.suppress(psutil.AccessDenied):
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in wanted:
                found[conn.laddr.port] = conn.pid
    return found


def listening_ports(ports: Iterable[int]) -> list[int]:
    return sorted(listeners(ports))


def foreign_listeners(ports: Mapping[str, int]) -> list[tuple[str, int, str]]:
    """(name, port, who) for each leased port something already listens on. Called before the
    spawn, so every listener is foreign: a squatter, or a leak of an earlier run."""
    by_port = {port: name for name, port in ports.items()}
    found = listeners(by_port)
    return [(by_port[port], port, _describe_pid(found[port])) for port in sorted(found)]


def _describe_pid(pid: int | None) -> str:
    if pid is None:
        return "pid unknown"
    try:
        return f"pid {pid}: {' '.join(psutil.Process(pid).cmdline())[:80]}"
    except psutil.Error:
        return f"pid {pid}"


LOOPBACK = ("127.0.0.1", "::1")


def exposed_listeners(pids: Iterable[int]) -> list[str]:
    """'address:port (pid: cmdline)' for every socket these processes listen on beyond loopback."""
    wanted = set(pids)
    found = []
    with contextlib.suppress(psutil.AccessDenied):
        for conn in psutil.net_connections(kind="inet"):
            if conn.status != psutil.CONN_LISTEN or conn.pid not in wanted or not conn.laddr:
                continue
            if conn.laddr.ip not in LOOPBACK:
                found.append(f"{conn.laddr.ip}:{conn.laddr.port} ({_describe_pid(conn.pid)})")
    return sorted(found)
