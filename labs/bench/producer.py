"""Producer figures: XADD one by one against pipelined batches, and XADD latency by MAXLEN."""

from __future__ import annotations

import time

import redis

from labs.experiments.ceiling import order_fields
from labs.experiments.latency import LAB_CASES, LatencyStats, case_label, xadd_latency

PIPELINE_BATCH = 100


def xadd_one_by_one(url: str, stream: str, n: int) -> float:
    """``n`` XADDs, one round trip each; returns messages per second."""
    with redis.Redis.from_url(url) as client:
        client.delete(stream)
        started = time.perf_counter()
        for i in range(n):
            client.xadd(stream, order_fields(i))
        rate = n / (time.perf_counter() - started)
        client.delete(stream)
    return rate


def xadd_pipelined(url: str, stream: str, n: int, batch: int = PIPELINE_BATCH) -> float:
    """``n`` XADDs in pipelines of ``batch``; returns messages per second."""
    with redis.Redis.from_url(url) as client:
        client.delete(stream)
        started = time.perf_counter()
        for start in range(0, n, batch):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + batch)):
                pipe.xadd(stream, order_fields(i))
            pipe.execute()
        rate = n / (time.perf_counter() - started)
        client.delete(stream)
    return rate


def latency_cases(url: str, stream: str, n: int) -> dict[str, LatencyStats]:
    """XADD latency with no MAXLEN, ``MAXLEN ~ 10000`` and ``MAXLEN = 10000``."""
    return {
        case_label(maxlen, approx): xadd_latency(url, stream=stream, n=n, maxlen=maxlen, approximate=approx)
        for maxlen, approx in LAB_CASES
    }
