"""What ``billing-producer`` is asked to do: one frozen, keyword-only dataclass, validated when it is built.

Build it in code (``ProducerOptions(stream="orders", rate=0, count=1000)``) or from the flags
(:func:`options_from_args`); where the stream lives is its :class:`~solutions.settings.Endpoint`,
made from the connection flags the worker takes too (:func:`solutions.cli.add_connection_flags`).
:meth:`ProducerOptions.site` is the :class:`~solutions.site.Site` the producer writes to: the
same kind the worker reads from (one stream, or a stream's shards on a cluster).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from solutions.cli import endpoint_from_args
from solutions.cluster_router import RoutingOptions
from solutions.cluster_site import ClusterSite
from solutions.settings import SOCKET_MARGIN_S, Endpoint, Settings
from solutions.site import Site, StreamSite


@dataclass(frozen=True, kw_only=True)
class ProducerOptions:
    """Where to write, how fast, how many, and how sure each send must be; see ``billing-producer --help``."""

    endpoint: Endpoint = field(default_factory=Endpoint)
    stream: str = "orders"
    rate: float = 50.0  # events per second; 0: as fast as the sends allow
    count: int | None = None  # None: until stopped
    maxlen: int | None = None  # approximate MAXLEN ~ per XADD; None: no trimming
    wait_replicas: int = 0  # WAIT for this many replicas after each XADD; 0: no WAIT
    wait_timeout_ms: int = 1000
    resend: int = 0  # an unknown or refused attempt is sent again, same event_id, up to this many more times
    orders: int = 100  # distinct order_id values
    log: Path | None = None  # one JSON line per attempt

    def __post_init__(self) -> None:
        problems = [
            "" if self.stream else "stream must be set",
            "" if self.rate >= 0 else f"rate must be >= 0 (0: as fast as possible), got {self.rate}",
            "" if self.count is None or self.count >= 0 else f"count must be >= 0, got {self.count}",
            "" if self.maxlen is None or self.maxlen > 0 else "maxlen must be > 0 (leave it out for no trimming)",
            "" if self.wait_replicas >= 0 else f"wait_replicas must be >= 0, got {self.wait_replicas}",
            "" if self.wait_timeout_ms >= 0 else f"wait_timeout_ms must be >= 0, got {self.wait_timeout_ms}",
            "" if self.resend >= 0 else f"resend must be >= 0, got {self.resend}",
            "" if self.orders > 0 else f"orders must be > 0, got {self.orders}",
        ]
        if any(problems):
            raise ValueError("invalid producer options: " + "; ".join(p for p in problems if p))

    @property
    def socket_timeout_s(self) -> float:
        """Longer than ``WAIT``'s timeout, so that a WAIT is never mistaken for a dead socket."""
        return (self.wait_timeout_ms / 1000 if self.wait_replicas else 0.0) + SOCKET_MARGIN_S

    def site(self) -> Site:
        """Where the events go: one stream by URL or Sentinel, or the shards of the stream on a cluster.

        On a cluster the shard clients give up on a failed send at once (``retry_for_s`` 0): a send
        whose connection broke is of *unknown* outcome, and only the producer may decide to send it
        again (it logs that attempt). No node answering is an error at once, not waited out.
        """
        settings = Settings(**self.endpoint.fields(), stream=self.stream)
        if settings.cluster:
            routing = RoutingOptions(socket_timeout_s=self.socket_timeout_s, retry_for_s=0.0)
            return ClusterSite(settings, routing, wait_for_cluster=False)
        return StreamSite(settings, socket_timeout_s=self.socket_timeout_s)


def options_from_args(args: argparse.Namespace) -> ProducerOptions:
    """The :class:`ProducerOptions` of parsed ``billing-producer`` flags; ValueError with the reasons."""
    return ProducerOptions(
        endpoint=endpoint_from_args(args),
        stream=args.stream,
        rate=args.rate,
        count=args.count,
        maxlen=args.maxlen,
        wait_replicas=args.wait_replicas,
        wait_timeout_ms=args.wait_timeout_ms,
        resend=args.resend,
        orders=args.orders,
        log=args.log,
    )
