"""The comparison's rows: one registry entry per row, naming the cluster it runs on and its adapter.

A fourth broker (Valkey 8 or Redis 8.2 from :mod:`labs.launcher.flavours`, say) is a launcher file,
an adapter implementing :class:`~labs.compare.contract.Broker`, a site in :mod:`labs.compare.sites`
when its cluster is new, and one :class:`RowSpec` here. Nothing else branches on a broker's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypedDict

from labs.compare.contract import Broker, Settings


class BrokerAddress(TypedDict, total=False):
    """Where a row's brokers answer and how they were started, as JSON (a consumer in another process
    builds the same adapter from it): Redis's ``sentinels`` ([host, port] pairs) or the ``urls``."""

    sentinels: list[list[str | int]]
    urls: list[str]
    copies: int  # Redis: the master and its replicas
    appendfsync: str  # Redis
    min_replicas_to_write: int  # Redis
    sync_always: bool  # NATS: jetstream { sync_interval: always }


@dataclass(frozen=True)
class RowSpec:
    kind: str  # the row's label
    cluster: str  # the site it runs on (a key of labs.compare.sites.CLUSTERS)
    make: Callable[[BrokerAddress, str, Settings], Broker]
    about: str  # one line for the report


def _redis(name: str, wait: int) -> Callable[[BrokerAddress, str, Settings], Broker]:
    def make(address: BrokerAddress, queue: str, settings: Settings) -> Broker:
        from labs.compare.redis_broker import RedisBroker, RedisSetup

        setup = RedisSetup(copies=int(address.get("copies", 2)),
                           appendfsync=str(address.get("appendfsync", "everysec")),
                           min_replicas_to_write=int(address.get("min_replicas_to_write", 0)))
        return RedisBroker([(str(h), int(p)) for h, p in address["sentinels"]], queue,
                           replace(settings, wait_replicas=wait), name=name, setup=setup)

    return make


def _rabbitmq(address: BrokerAddress, queue: str, settings: Settings) -> Broker:
    from labs.compare.rabbit_broker import RabbitBroker

    return RabbitBroker(address["urls"], queue, settings)


def _nats(address: BrokerAddress, queue: str, settings: Settings) -> Broker:
    from labs.compare.nats_broker import NatsBroker

    return NatsBroker(address["urls"], queue, settings, sync_always=bool(address.get("sync_always", False)))


ROWS: dict[str, RowSpec] = {spec.kind: spec for spec in (
    RowSpec("redis", "redis", _redis("redis", 0), "Redis Streams, no WAIT (asynchronous replication)"),
    RowSpec("redis+WAIT", "redis", _redis("redis+WAIT", 1), "Redis Streams, WAIT 1 after each batch of XADDs"),
    RowSpec("redis+WAIT+always", "redis-always", _redis("redis+WAIT+always", 1),
            "Redis Streams, WAIT 1, appendfsync always (fsync parity with RabbitMQ)"),
    RowSpec("rabbitmq", "rabbitmq", _rabbitmq, "RabbitMQ quorum queue, publisher confirms"),
    RowSpec("nats", "nats", _nats, "NATS JetStream, R3 file stream, sync_interval default (2 min)"),
    RowSpec("nats+always", "nats-always", _nats, "NATS JetStream, R3 file stream, sync_interval: always"),
)}
KINDS = tuple(ROWS)
DEFAULT_KINDS = KINDS


def make_broker(kind: str, address: BrokerAddress, queue: str, settings: Settings) -> Broker:
    """The adapter of row ``kind`` for ``queue`` at ``address``."""
    try:
        spec = ROWS[kind]
    except KeyError:
        raise ValueError(f"unknown broker {kind!r}; choose one of {', '.join(KINDS)}") from None
    return spec.make(address, queue, settings)
