"""The billing-worker CLI contract (DESIGN.md): flags, defaults, settings, --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from billing_support import ROOT

from solutions.billing import build_parser, settings_from_args
from solutions.settings import Settings

CONTRACT = {
    "redis_url": "redis://127.0.0.1:6390/0",
    "master_name": "mymaster",
    "stream": "orders",
    "group": "billing",
    "count": 16,
    "block_ms": 2000,
    "parallelism": 8,
    "order_key": "order_id",
    "min_idle_ms": 120000,
    "claim_interval_ms": 30000,
    "max_attempts": 5,
    "dedupe": "sqlite",
    "ledger": Path(".run/ledger.sqlite3"),
    "handler_delay_ms": 50,
    "handler_jitter_ms": 0,
    "fail_every": 0,
    "drain_timeout_s": 30,
    "metrics_interval_s": 10,
    "metrics_port": None,
}


def test_defaults_match_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("BILLING_"):
            monkeypatch.delenv(name)
    s = settings_from_args(build_parser().parse_args([]))
    for name, value in CONTRACT.items():
        assert getattr(s, name) == value, name
    assert s.sentinels == ()
    assert s.consumer.endswith(f"-{__import__('os').getpid()}")
    assert s.dlq_stream == "orders:dlq"
    assert s.socket_timeout_s > s.block_ms / 1000


def test_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_DEDUPE", "redis")
    args = build_parser().parse_args(
        ["--sentinel", "127.0.0.1:26390", "--sentinel", "127.0.0.1:26391", "--master-name", "m",
         "--order-key", "", "--fail-every", "7", "--metrics-port", "9100", "--parallelism", "16"]
    )
    s = settings_from_args(args)
    assert s.sentinels == (("127.0.0.1", 26390), ("127.0.0.1", 26391))
    assert (s.master_name, s.order_key, s.fail_every, s.metrics_port, s.parallelism) == ("m", "", 7, 9100, 16)
    assert s.dedupe == "redis"


@pytest.mark.parametrize(
    "bad",
    [{"count": 0}, {"dedupe": "magic"}, {"max_attempts": 0}, {"handler_delay_ms": -1}, {"block_ms": 0}],
)
def test_invalid_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="invalid settings"):
        Settings(**bad)  # type: ignore[arg-type]


def test_help_explains_every_flag_with_its_default() -> None:
    done = subprocess.run([sys.executable, "-m", "solutions.billing", "--help"], cwd=ROOT, capture_output=True,
                          timeout=30)
    assert done.returncode == 0
    text = " ".join(done.stdout.decode().split())
    for flag in ("--redis-url", "--sentinel", "--master-name", "--stream", "--group", "--consumer", "--count",
                 "--block-ms", "--parallelism", "--order-key", "--min-idle-ms", "--claim-interval-ms",
                 "--max-attempts", "--dedupe", "--ledger", "--handler-delay-ms", "--handler-jitter-ms",
                 "--fail-every", "--drain-timeout-s", "--metrics-interval-s", "--metrics-port"):
        assert flag in text, flag
    assert "default: redis://127.0.0.1:6390/0" in text and "default: sqlite" in text


def test_bad_flag_value_exits_with_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "solutions.billing", "--count", "0"], cwd=ROOT,
                          capture_output=True, timeout=30)
    assert done.returncode == 2
    assert b"count must be > 0" in done.stderr
