"""labs.launcher.ports: the port windows and the pickers the tests and the launcher use."""

from __future__ import annotations

import socket

import pytest
from port_support import session_ports, worker_share, worker_window

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


def test_free_port_is_below_the_ephemeral_range_and_not_handed_out_twice() -> None:
    """A port for a server started next is never one a client socket can be given meanwhile (a
    split-brain run met "port 34495 is in use" with bind(0)), and a pick not yet bound is not
    picked again by this process."""
    low = int(ports.EPHEMERAL_RANGE_FILE.read_text().split()[0])
    picked = [ports.free_port() for _ in range(50)]
    assert all(p < low and p in ports.session_port_window() for p in picked)
    assert len(set(picked)) == 50
    window = range(picked[0], picked[0] + 1)  # the one port, free but just handed out
    with pytest.raises(LauncherError, match="no 1 free ports"):
        ports.free_ports(1, window)


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_runs_outside_the_tests_pick_where_no_worker_share_lies(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """A ``make compare`` beside the suite took a port a worker had reserved for notebook 10's
    exporter (FLAKES.md): without a share in the environment, a run picks in windows of its own,
    disjoint from every worker's shares, node and cluster bus ports both."""
    for var in ports.WINDOW_VARS:
        monkeypatch.delenv(var, raising=False)
    outside_cluster, outside_session = ports.cluster_port_window(), ports.session_port_window()
    outside = {*outside_session, *outside_cluster, *(p + ports.CLUSTER_BUS_OFFSET for p in outside_cluster)}
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    for index in range(workers):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        cluster, session = worker_window(), worker_share(ports.suite_session_window())
        reserved = {*session, *cluster, *(p + ports.CLUSTER_BUS_OFFSET for p in cluster)}
        assert len(session) >= 100 and len(cluster) >= 100, (workers, index, session, cluster)
        assert not outside & reserved, (f"worker {index} of {workers}: session {session}, cluster {cluster}; "
                                        f"outside: session {outside_session}, cluster {outside_cluster}")
    assert len(outside_session) >= 500 and len(outside_cluster) >= 500, (outside_session, outside_cluster)
    picked = {int(p) for value in ports.port_set().values() for p in value.split(",")}
    assert picked <= {*outside_session, *outside_cluster}, sorted(picked - {*outside_session, *outside_cluster})
