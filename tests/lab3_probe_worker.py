"""Probe workers for the lab-3 checker's tests: the compact reference with exactly one thing skipped.

``python tests/lab3_probe_worker.py --probe NAME [the lab's worker flags]`` runs
:mod:`labs.lab3.worker_reference` with one flaw; ``make check-lab-3`` must fail each one and
say why:

- ``never-fails``: ignores ``--fail-every`` (no attempt ever fails, nothing is redelivered);
- ``no-dedupe``: ignores ``--dedupe`` (every delivery charges again, ``applied_events`` is never written);
- ``ack-first``: sends the XACK before the work and the charge (a failed attempt is lost);
- ``no-drain``: on SIGTERM exits at once with code 0, without finishing its work or writing ``drain complete``.

With ``--probe none`` it is the compact reference itself.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

import redis

from labs.lab3 import worker_reference as ref

Message = ref.Message


class NeverFails(ref.Worker):
    def work(self, message: Message) -> bool:
        super().work(message)  # the delay, and the attempt counted
        return True


class NoDedupe(ref.Worker):
    def begin(self, fields: dict[str, str]) -> bool:
        return True

    def charge(self, msg_id: str, fields: dict[str, str]) -> None:
        self.db.execute("INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) "
                        "VALUES (?,?,?,?,?,?)", (fields["event_id"], fields["order_id"], fields["amount"], msg_id,
                                                 self.a.consumer, time.time()))


class AckFirst(ref.Worker):
    def handle(self, messages: list[Message]) -> None:
        for msg_id, _ in messages:
            self.redis.xack(self.a.stream, self.a.group, msg_id)  # THE BUG: acknowledged before the work
        super().handle(messages)

    def finish(self, msg_id: str, fields: dict[str, str]) -> None:
        self.charge(msg_id, fields)


class NoDrain(ref.Worker):
    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # THE BUG: gone at once, work in hand dropped
        signal.signal(signal.SIGINT, lambda *_: os._exit(0))
        ref.with_group(self.redis, self.a.stream, self.a.group)
        next_rescue = time.monotonic()
        while True:
            try:
                self.handle(self.read())
                if time.monotonic() >= next_rescue:
                    next_rescue = time.monotonic() + self.a.claim_interval_ms / 1000
                    self.rescue()
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                time.sleep(0.5)


PROBES: dict[str, type[ref.Worker]] = {
    "none": ref.Worker, "never-fails": NeverFails, "no-dedupe": NoDedupe, "ack-first": AckFirst, "no-drain": NoDrain,
}


def main(probe: str | None = None) -> None:
    if probe is None:
        p = argparse.ArgumentParser()
        p.add_argument("--probe", choices=sorted(PROBES), required=True)
        known, rest = p.parse_known_args()
        probe, sys.argv[1:] = known.probe, rest
    args = ref.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s [{args.consumer}] %(message)s")
    PROBES[probe](args).run()


if __name__ == "__main__":
    main()
