"""Which labelled containers count as orphaned: judged against real processes on this host."""

from __future__ import annotations

import socket

import psutil

from harness.cli.docker import (
    OWNER_HOST_LABEL,
    OWNER_LABEL,
    OWNER_STARTED_LABEL,
    owner_is_gone,
    owner_labels,
)


def test_a_live_owner_is_not_gone() -> None:
    assert owner_is_gone(owner_labels()) is False


def test_an_exited_owner_is_gone() -> None:
    proc = psutil.Popen(["true"])
    labels = owner_labels(proc)
    proc.wait()
    assert owner_is_gone(labels) is True


def test_a_reused_pid_is_told_apart_by_its_start_time() -> None:
    labels = {**owner_labels(), OWNER_STARTED_LABEL: "12.00"}
    assert owner_is_gone(labels) is True


def test_another_hosts_container_is_left_alone() -> None:
    labels = {**owner_labels(), OWNER_HOST_LABEL: socket.gethostname() + "-elsewhere"}
    labels[OWNER_LABEL] = "999999999"
    assert owner_is_gone(labels) is False


def test_a_container_without_owner_labels_is_left_alone() -> None:
    assert owner_is_gone({"serve-harness": "1", OWNER_HOST_LABEL: socket.gethostname()}) is False
