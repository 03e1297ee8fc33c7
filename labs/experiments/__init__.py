"""The measured experiments that notebooks and labs call, each with its ``tests/test_<name>.py``.

- :mod:`labs.experiments.persistence`: what kill -9 leaves of acknowledged writes, with and without AOF;
- :mod:`labs.experiments.replication`: WAIT under a cut link, and the tail a failover loses;
- :mod:`labs.experiments.cluster_faults`: the tail a cluster failover loses, and which shards stall while
  one master dies (``cluster-require-full-coverage`` yes against no);
- :mod:`labs.experiments.cluster_routing`: what an XREADGROUP costs through redis-py's ``RedisCluster``
  (two ``COMMAND GETKEYS`` round trips) and through the shard router (none);
- :mod:`labs.experiments.latency`: XADD latency with and without MAXLEN.
- :mod:`labs.experiments.drain`: graceful shutdown of a worker subprocess (SIGTERM under load, drain timeout, rescue);
- :mod:`labs.experiments.worker_procs`: ``billing-worker`` / ``billing-producer`` subprocesses, the ledger and the PEL.
- :mod:`labs.experiments.alert_faults`: real faults against the monitoring add-on: which alert fires, how
  long after, what stays quiet, and a producer that records its first OOM;
- :mod:`labs.experiments.monitored_queue`: workers with ``/metrics`` registered in Prometheus, a producer,
  a quiet stream;
- :mod:`labs.experiments.operator_info`: INFO as an operator reads it; a Lua stall in SLOWLOG and LATENCY;
- :mod:`labs.experiments.key_incidents`: ``--bigkeys``, ``--hotkeys`` (LFU only), eviction of a stream
  as Prometheus sees it.
"""
