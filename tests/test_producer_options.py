"""``billing-producer``'s options: validated when built, on the worker's connection flags and sites."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

import pytest

from solutions import billing, producer
from solutions.cluster_site import ClusterSite
from solutions.producer_options import ProducerOptions, options_from_args
from solutions.settings import SOCKET_MARGIN_S, Endpoint
from solutions.site import StreamSite

CONNECTION_FLAGS = ("--redis-url", "--sentinel", "--master-name", "--cluster", "--shards")


def _flags(parser: argparse.ArgumentParser) -> dict[str, tuple[object, object, object]]:
    return {flag: (action.dest, action.default, action.type)
            for action in parser._actions for flag in action.option_strings if flag in CONNECTION_FLAGS}


def test_both_clis_take_the_same_connection_flags() -> None:
    worker, made = _flags(billing.build_parser()), _flags(producer.build_parser())
    assert sorted(worker) == sorted(CONNECTION_FLAGS)
    assert worker == made


def test_the_flags_become_options_with_an_endpoint() -> None:
    args = producer.build_parser().parse_args(["--sentinel", "127.0.0.1:26379", "--master-name", "m1",
                                               "--stream", "s1", "--rate", "0", "--count", "5"])
    options = options_from_args(args)
    assert options.endpoint.sentinels == (("127.0.0.1", 26379),) and options.endpoint.master_name == "m1"
    assert (options.stream, options.rate, options.count, options.maxlen) == ("s1", 0.0, 5, None)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: ProducerOptions(maxlen=0), "maxlen must be > 0 (leave it out for no trimming)"),
        (lambda: ProducerOptions(resend=-1), "resend must be >= 0"),
        (lambda: ProducerOptions(rate=-1.0), "rate must be >= 0"),
        (lambda: ProducerOptions(orders=0), "orders must be > 0"),
        (lambda: ProducerOptions(count=-1), "count must be >= 0"),
    ],
    ids=["maxlen", "resend", "rate", "orders", "count"],
)
def test_bad_options_are_refused_with_the_reason(build: Callable[[], ProducerOptions], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        build()


def test_the_endpoint_rules_are_the_workers() -> None:
    with pytest.raises(ValueError, match="shards needs cluster"):
        Endpoint(shards=3)
    with pytest.raises(ValueError, match="1 to 16384"):
        Endpoint(cluster=(("127.0.0.1", 7000),), shards=0)
    with pytest.raises(ValueError, match="not both"):
        Endpoint(cluster=(("127.0.0.1", 7000),), sentinels=(("127.0.0.1", 26379),))


def test_the_site_is_a_stream_or_the_shards_and_the_socket_outlasts_wait() -> None:
    plain = ProducerOptions(wait_replicas=1, wait_timeout_ms=2500)
    assert plain.socket_timeout_s == 2.5 + SOCKET_MARGIN_S
    site = plain.site()
    assert isinstance(site, StreamSite) and site.socket_timeout_s == plain.socket_timeout_s
    sharded = ProducerOptions(endpoint=Endpoint(cluster=(("127.0.0.1", 7000),), shards=2))
    cluster = sharded.site()
    assert isinstance(cluster, ClusterSite) and not cluster.wait_for_cluster
    assert cluster.routing.retry_for_s == 0.0 and cluster.routing.socket_timeout_s == SOCKET_MARGIN_S
