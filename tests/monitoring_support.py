"""The shared monitoring stack of test_alert_faults and test_key_incidents (the fixture is in conftest)."""

from __future__ import annotations

from dataclasses import dataclass

from labs.launcher.monitoring import Monitoring
from labs.launcher.topology import Topology


@dataclass
class MonitoredStack:
    """The session's sentinel and aof topologies, watched by the monitoring add-on."""

    mon: Monitoring
    sentinel: Topology
    aof: Topology

    def node(self, topo: Topology) -> str:
        """The ``node`` label of the topology's first server (the aof node, or the first sentinel server)."""
        return f"127.0.0.1:{topo.servers[0].port}"
