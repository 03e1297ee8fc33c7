"""labs.launcher.ports: the port windows and the pickers the tests and the launcher use."""

from __future__ import annotations

import socket

import pytest
from port_support import session_ports

from labs.launcher import ports
from labs.launcher.errors import LauncherError


def test_session_ports_lie_below_the_ephemeral_range_and_skip_a_bound_port() -> None:
    """The tests' own topologies take ports that no bind(0) and no client socket is ever handed
    (so a port reserved in the environment and bound minutes later is still free), disjoint
    from the cluster window and its bus ports; a port somebody has bound is never picked."""
    window, cluster = ports.session_port_window(), ports.cluster_port_window()
    low = int(ports.EPHEMERAL_RANGE_FILE.read_text().split()[0])
    assert window.stop <= cluster.start and cluster.stop + ports.CLUSTER_BUS_OFFSET <= low
    picked = session_ports(3)
    assert len(set(picked)) == 3 and all(p in window for p in picked)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(LauncherError, match="no 1 free ports"):
            ports.free_ports(1, range(port, port + 1))
