"""labs.experiments.dlq_move: MULTI adds a dead letter whatever XACK says; the worker's script does not."""

from __future__ import annotations

import pytest
import redis

from labs.experiments.dlq_move import late_dead_letter

pytestmark = pytest.mark.timeout(30)


def test_multi_dead_letters_a_message_that_was_done_and_the_script_does_not(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    assert late_dead_letter(redis_client, f"{key_prefix}m", how="multi") == (0, 1)  # XACK found nothing, XADD ran
    assert late_dead_letter(redis_client, f"{key_prefix}s", how="script") == (0, 0)  # XADD only if XACK returned 1
    assert redis_client.exists(f"{key_prefix}m", f"{key_prefix}m:dlq", f"{key_prefix}s:dlq") == 0


def test_how_is_checked(redis_client: redis.Redis, key_prefix: str) -> None:
    with pytest.raises(ValueError, match="multi"):
        late_dead_letter(redis_client, f"{key_prefix}x", how="watch")
