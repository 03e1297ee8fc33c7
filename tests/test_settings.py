"""Settings: defaults, validation in one message, the socket timeout above BLOCK, env defaults, addresses."""

from __future__ import annotations

from pathlib import Path

import pytest

from solutions.settings import SOCKET_MARGIN_S, Settings, env_default, parse_address


def test_defaults_and_derived_names() -> None:
    s = Settings(consumer="c")
    assert (s.stream, s.group, s.dedupe, s.metrics_port, s.metrics_host) == ("orders", "billing", "sqlite", None,
                                                                              "127.0.0.1")
    assert s.dlq_stream == "orders:dlq"
    assert s.rescuer_lease_key == "orders:billing:rescuer"
    assert s.dedupe_prefix == "processed:orders:billing:"
    assert isinstance(s.ledger, Path)


@pytest.mark.parametrize("block_ms", [100, 2000, 30_000])
def test_the_socket_timeout_is_above_block_by_a_fixed_margin(block_ms: int) -> None:
    """An idle blocking read must never look like a dead socket; a stalled one must not hang for long."""
    s = Settings(block_ms=block_ms)
    assert s.socket_timeout_s == pytest.approx(block_ms / 1000 + SOCKET_MARGIN_S)
    assert 1.0 <= SOCKET_MARGIN_S <= 2.0


def test_every_problem_is_named_in_one_message() -> None:
    with pytest.raises(ValueError) as caught:
        Settings(count=0, parallelism=-1, dedupe="magic", metrics_port=70_000)
    text = str(caught.value)
    assert text.startswith("invalid settings: ")
    for part in ("count must be > 0", "parallelism must be > 0", "dedupe must be one of", "bad metrics_port"):
        assert part in text


def test_sentinels_are_normalised() -> None:
    s = Settings(sentinels=(("127.0.0.1", "26379"),))  # type: ignore[arg-type]  # the point: a str port
    assert s.sentinels == (("127.0.0.1", 26379),)


def test_env_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_BLOCK_MS", "500")
    assert env_default("block-ms", "2000") == "500"
    assert env_default("drain-timeout-s", "30") == "30"


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:26390") == ("127.0.0.1", 26390)
    assert parse_address("::1:26390") == ("::1", 26390)
    for bad in ("nohost", ":1", "h:", "h:x"):
        with pytest.raises(ValueError, match="expected HOST:PORT"):
            parse_address(bad)
