"""labs/compare on RabbitMQ (3 nodes, a quorum queue): the contract's semantics, never absolute timings."""

from __future__ import annotations

import pytest
from compare_support import BrokerContract

pytestmark = pytest.mark.timeout(240)


class TestRabbitMQ(BrokerContract):
    kind = "rabbitmq"
    restart_killed = False  # the last test of the class: the killed node stays down
