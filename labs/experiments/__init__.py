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
"""
