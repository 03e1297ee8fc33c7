"""Cluster ports for the tests: each pytest-xdist worker picks in a window of its own.

Node and bus ports come from below the kernel's ephemeral range (see
:func:`labs.launcher.ports.cluster_port_window`); splitting that window between the workers
means two workers that pick at the same moment can never pick the same port.
"""

from __future__ import annotations

import os

from labs.launcher import ports


def worker_window() -> range:
    """This worker's share of the cluster port window (the whole window without xdist)."""
    window = ports.cluster_port_window()
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    width = len(window) // max(count, 1)
    start = window.start + index * width
    return range(start, start + width)


def cluster_ports(n: int = 6) -> list[int]:
    """``n`` free node ports with free bus ports, in this worker's window."""
    return ports.free_cluster_ports(n, worker_window())
