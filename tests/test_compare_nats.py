"""labs/compare on NATS JetStream (3 servers, R3): the contract's semantics, never absolute timings."""

from __future__ import annotations

import pytest
from compare_support import BrokerContract

pytestmark = pytest.mark.timeout(150)


class TestNats(BrokerContract):
    kind = "nats"
