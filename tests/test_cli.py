"""The billing-worker CLI contract (DESIGN.md): flags, defaults, settings, --help."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from billing_support import ROOT, reaped, spawn, stop_process, wait_until

from labs.launcher.ports import free_port
from solutions.billing import build_parser, settings_from_args
from solutions.settings import Settings
from solutions.worker import Worker

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
    "metrics_host": "127.0.0.1",
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
        Settings(**bad)  # type: ignore[arg-type]  # each case gives one field a bad value


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
    assert "(default: None)" not in text
    assert not re.search(r"\(default: [^)]*\) \(default:", text), "a default printed twice"
    assert "(default: off)" in text and "--metrics-host" in text and "default: 127.0.0.1" in text
    assert "(default: <hostname>-<pid>)" in text and "attempt fails transiently (0: never) (default: 0)" in text


def worker_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``billing-worker`` as a user runs it (the console script of the venv)."""
    return subprocess.run([str(ROOT / ".venv/bin/billing-worker"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, env={**os.environ, **(env or {})})


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--count", "0"], {}, "count must be > 0"),
        (["--redis-url", "notaurl"], {}, "argument --redis-url: 'notaurl' is not a Redis URL"),
        (["--redis-url", "redis://host:port/0"], {}, "is not a Redis URL"),
        (["--ledger", "/no/such/dir/x.db"], {}, "argument --ledger: directory /no/such/dir does not exist"),
        ([], {"BILLING_COUNT": "many"}, "argument --count: invalid int value: 'many'"),
        (["--sentinel", "nohost"], {}, "expected HOST:PORT"),
    ],
    ids=["count-0", "not-a-url", "bad-port", "no-ledger-dir", "bad-env", "bad-sentinel"],
)
def test_bad_input_gets_one_line_and_exit_2(args: list[str], env: dict[str, str], says: str) -> None:
    done = worker_cli(*args, env=env)
    assert done.returncode == 2
    line = one_line_error(done)
    assert line.startswith("billing-worker: error: ") and says in line, line
    assert not Path("/no/such").exists()


def test_a_directory_given_as_the_ledger_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Bad input, caught while the flags are parsed (exit 2, like every bad flag)."""
    (tmp_path / "x.db").mkdir()  # a directory where the database file should be
    done = worker_cli("--ledger", str(tmp_path / "x.db"), "--redis-url", "redis://127.0.0.1:1/0")
    assert done.returncode == 2 and "is a directory" in one_line_error(done)


def test_a_ledger_that_cannot_be_opened_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """A good flag, but SQLite cannot create the file: the directory is immutable (``chattr +i``,
    which stops root too). The worker cannot start: one line, exit 1."""
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("an immutable directory needs chattr and root")
    sealed = tmp_path / "sealed"
    sealed.mkdir()
    if subprocess.run(["chattr", "+i", str(sealed)], capture_output=True).returncode != 0:
        pytest.skip(f"chattr +i is not supported on the filesystem of {tmp_path}")
    try:
        done = worker_cli("--ledger", str(sealed / "l.db"), "--redis-url", "redis://127.0.0.1:1/0")
    finally:
        subprocess.run(["chattr", "-i", str(sealed)], check=True)
    assert done.returncode == 1
    line = one_line_error(done)
    assert line.endswith(f"cannot use the ledger {sealed / 'l.db'}: OperationalError: unable to open database file")


@pytest.mark.timeout(60)
def test_dead_redis_at_start_is_one_clear_line_then_quiet_backoff(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    proc = spawn("solutions.billing", "--redis-url", f"redis://127.0.0.1:{free_port()}/0", "--ledger",
                 str(tmp_path / "l.db"), "--block-ms", "200", "--claim-interval-ms", "200", log_path=log)
    with reaped(proc):
        wait_until(lambda: "XREADGROUP on orders failed, retrying with backoff: ConnectionError" in log.read_text(),
                   15, "the reader's first failure")
        time.sleep(3)  # a hot loop (or a warning per retry) would log dozens of lines meanwhile
        assert stop_process(proc) == 0
    text = log.read_text()
    assert "Traceback" not in text
    assert len([ln for ln in text.splitlines() if "WARNING" in ln]) <= 4, text


def test_a_repeated_sigterm_logs_received_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A second SIGTERM while draining (a supervisor that signals the process and its group, an
    impatient user) is one 'again' line, not a second 'received SIGTERM'. (Two 'received SIGTERM'
    lines in one log file are two lives of the worker: lab 3 restarts billing-2 into the same
    file; the pid in the line tells them apart.)"""
    caplog.set_level(logging.INFO, logger="solutions.worker")
    worker = Worker(Settings(ledger=tmp_path / "l.db", consumer="c"))
    worker._on_signal(signal.SIGTERM)
    worker._on_signal(signal.SIGTERM)
    messages = [r.getMessage() for r in caplog.records if r.name == "solutions.worker"]
    assert messages == [f"received SIGTERM (pid {os.getpid()}): stop reading and drain (up to 30.0s)",
                        f"SIGTERM again (pid {os.getpid()}): already draining"]


def test_a_ledger_that_is_not_a_database_is_one_line_and_exit_1(tmp_path: Path) -> None:
    ledger = tmp_path / "x.db"
    ledger.write_bytes(b"this is not an SQLite file" * 200)
    done = worker_cli("--ledger", str(ledger), "--redis-url", "redis://127.0.0.1:1/0")
    assert done.returncode == 1
    assert one_line_error(done).endswith(f"cannot use the ledger {ledger}: DatabaseError: file is not a database")


def test_a_metrics_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = worker_cli("--metrics-port", str(port), "--ledger", str(tmp_path / "l.db"),
                          "--redis-url", "redis://127.0.0.1:1/0")
    assert done.returncode == 1
    line = [ln for ln in done.stderr.splitlines() if "ERROR" in ln]
    assert len(line) == 1 and "Address already in use" in line[0] and "Traceback" not in done.stderr
