"""Ports for the tests: each pytest-xdist worker picks in windows of its own.

Cluster node and bus ports (:func:`labs.launcher.ports.cluster_port_window`) and the ports of
a session's own topologies and monitoring (:func:`labs.launcher.ports.session_port_window`)
come from below the kernel's ephemeral range, where only an explicit bind takes a port;
splitting each window between the workers means two workers can never pick the same port,
even one that is reserved in the environment and bound only later. The workers split only the
suite's part of each window (:func:`labs.launcher.ports.suite_cluster_window`,
:func:`labs.launcher.ports.suite_session_window`): the rest is kept for runs outside the tests.
"""

from __future__ import annotations

import os

from labs.launcher import ports


def worker_share(window: range) -> range:
    """This worker's share of ``window`` (the whole window without xdist)."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    width = len(window) // max(count, 1)
    start = window.start + index * width
    return range(start, start + width)


def worker_window() -> range:
    """This worker's share of the suite's cluster port window."""
    return worker_share(ports.suite_cluster_window())


def cluster_ports(n: int = 6) -> list[int]:
    """``n`` free node ports with free bus ports, in this worker's window."""
    return ports.free_cluster_ports(n, worker_window())


def session_ports(n: int) -> list[int]:
    """``n`` distinct free ports for the session's own topologies, in this worker's window."""
    return ports.free_ports(n, worker_share(ports.suite_session_window()))
