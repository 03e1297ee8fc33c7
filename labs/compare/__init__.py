"""Module 4: the billing workload and its faults on Redis Streams, RabbitMQ and NATS JetStream.

One contract (:mod:`labs.compare.contract`), one thin adapter per broker, one handler and SQLite
ledger (:mod:`labs.compare.consumer`), one producer (:mod:`labs.compare.producer`), so that what
differs between the rows is the broker. ``make compare`` runs :mod:`labs.compare.run`.
"""
