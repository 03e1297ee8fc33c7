"""labs.experiments.acked_trim: XACKDEL / XDELEX and trimming with ACKED on Redis 8.2; absent on 7.0 and Valkey 8.

The 8.2 tests run where the session's server has the commands (``make test-matrix``, flavour
``redis8``) and are skipped, with the reason, on the default Redis 7.0.
"""

from __future__ import annotations

import pytest
import redis

from labs.experiments.acked_trim import FIXED_APPROX_ACKED, ack_and_delete, supports_acked, trim_with_slow_group
from labs.launcher.flavours import server_version

pytestmark = pytest.mark.timeout(30)


def _needs_acked(client: redis.Redis) -> None:
    if not supports_acked(client):
        info = client.info("server")
        pytest.skip(f"{info.get('server_name', 'redis')} {server_version(info)} has no XACKDEL (Redis >= 8.2)")


def test_the_commands_exist_exactly_from_redis_8_2(redis_client: redis.Redis) -> None:
    info = redis_client.info("server")
    is_valkey = str(info.get("server_name", "")).lower() == "valkey"
    expected = not is_valkey and server_version(info) >= (8, 2, 0)
    assert supports_acked(redis_client) is expected


def test_xackdel_policies_decide_what_the_other_group_still_gets(redis_client: redis.Redis, key_prefix: str) -> None:
    _needs_acked(redis_client)
    run = ack_and_delete(redis_client, f"{key_prefix}s")
    assert run.acked_kept == 2  # ACKED: slow has not read it yet, so it stays
    assert run.keepref_deleted == 1  # KEEPREF (the default): deleted although slow never read it
    assert run.slow_got == [run.ids[0], run.ids[1], run.ids[3]]  # ... and slow never gets it
    assert run.xack_len == 3  # a plain XACK by both groups deletes nothing
    assert run.acked_deleted == 1  # ACKED once both groups are done: deleted
    assert run.xdelex_codes == [2, -1]  # pending in slow: kept; unknown ID: -1
    assert run.final_len == 2


def test_exact_trim_with_acked_keeps_what_a_slow_group_has_not_read(redis_client: redis.Redis, key_prefix: str) -> None:
    _needs_acked(redis_client)
    plain, acked, approx = trim_with_slow_group(redis_client, f"{key_prefix}t", entries=300, slow_read=100, maxlen=10)
    assert (plain.deleted, plain.length, plain.slow_can_still_read) == (290, 10, 10)  # 190 unread entries gone
    assert (acked.deleted, acked.length, acked.slow_can_still_read) == (100, 200, 200)  # only what both acked
    assert approx.slow_can_still_read == 200  # never deletes what slow still needs
    if server_version(redis_client.info("server")) < FIXED_APPROX_ACKED:
        assert approx.deleted == 0  # redis/redis#14656: MAXLEN ~ ... ACKED trims nothing before 8.2.7
    else:
        assert 0 < approx.deleted <= 100
