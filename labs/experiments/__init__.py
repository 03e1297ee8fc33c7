"""The measured experiments that notebooks and labs call, each with its ``tests/test_<name>.py``.

- :mod:`labs.experiments.persistence`: what kill -9 leaves of acknowledged writes, with and without AOF;
- :mod:`labs.experiments.replication`: WAIT under a cut link, and the tail a failover loses;
- :mod:`labs.experiments.latency`: XADD latency with and without MAXLEN.
- :mod:`labs.experiments.drain`: graceful shutdown of a worker subprocess (SIGTERM under load, drain timeout, rescue);
- :mod:`labs.experiments.worker_procs`: ``billing-worker`` / ``billing-producer`` subprocesses, the ledger and the PEL.
"""
