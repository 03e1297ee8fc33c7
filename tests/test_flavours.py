"""Server flavours: ``REDIS=redis7|valkey8|redis8`` picks the binaries, each refused in one line when unfit."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.launcher import binaries, flavours
from labs.launcher.errors import LauncherError


def _fake(tmp_path: Path, name: str, banner: str) -> None:
    fake = tmp_path / name
    fake.write_text(f"#!/bin/sh\necho '{banner}'\n")
    fake.chmod(0o755)


def test_default_flavour_is_debians_redis7(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(flavours.FLAVOUR_VAR, raising=False)
    assert flavours.current().name == "redis7"
    assert flavours.current().file_name("redis-server") == "redis-server"


def test_unknown_flavour_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(flavours.FLAVOUR_VAR, "redis6")
    with pytest.raises(LauncherError) as err:
        binaries.require("redis-server")
    assert "redis7, valkey8, redis8" in str(err.value) and "\n" not in str(err.value)


def test_valkey8_uses_the_valkey_binaries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(flavours.FLAVOUR_VAR, "valkey8")
    monkeypatch.setenv("REDIS_BIN_DIR", str(tmp_path))
    _fake(tmp_path, "valkey-server", "Valkey server v=8.0.1 sha=00000000:0")
    assert binaries.require("redis-server") == str(tmp_path / "valkey-server")
    with pytest.raises(LauncherError) as err:
        binaries.require("redis-sentinel")
    assert "valkey-sentinel not found" in str(err.value)
    assert "install it with 'make setup REDIS=valkey8'" in str(err.value)


def test_a_flavour_refuses_an_older_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(flavours.FLAVOUR_VAR, "redis8")
    monkeypatch.setenv("REDIS_BIN_DIR", str(tmp_path))
    _fake(tmp_path, "redis-server", "Redis server v=7.0.15 sha=0")
    with pytest.raises(LauncherError, match=r"Redis 7\.0\.15, the labs need >= 8\.2"):
        binaries.require("redis-server")
    _fake(tmp_path, "redis-cli", "redis-cli 7.0.15")
    assert binaries.require("redis-cli")  # redis8 borrows Debian's redis-cli: 7.0 is enough for it


def test_describe_reads_valkeys_own_version() -> None:
    valkey = {"server_name": "valkey", "redis_version": "7.2.4", "valkey_version": "8.0.1"}
    assert flavours.describe(valkey) == "valkey8 (Valkey 8.0.1)"
    assert flavours.server_version(valkey) == (8, 0, 1)
    assert flavours.describe({"redis_version": "8.2.3"}) == "redis8 (Redis 8.2.3)"


@pytest.mark.parametrize("name", sorted(flavours.FLAVOURS))
def test_installed_flavours_report_their_version(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(flavours.FLAVOUR_VAR, name)
    monkeypatch.delenv("REDIS_BIN_DIR", raising=False)
    try:
        server = binaries.require("redis-server")
    except LauncherError as err:
        pytest.skip(f"{name} is not installed here: {err}")
    assert binaries.version(server)[:2] >= flavours.FLAVOURS[name].min_version
    assert binaries.require("redis-sentinel") and binaries.require("redis-cli")


def test_only_redis_8_0_and_later_stops_counting_trimmed_entries_in_a_groups_lag() -> None:
    """The servers measured: Redis 7.0.15 and Valkey 8.0.1 keep counting trimmed entries, Redis 8.2.3 does not;
    the change came with Redis 8.0 (redis/redis#13473 in 8.0-M01, #13958 in the 8.0.0 notes)."""
    assert not flavours.trim_moves_group_lag({"redis_version": "7.0.15"})
    valkey = {"redis_version": "7.2.4", "valkey_version": "8.0.1", "server_name": "valkey"}
    assert not flavours.trim_moves_group_lag(valkey)
    assert flavours.trim_moves_group_lag({"redis_version": "8.2.3"})
    assert flavours.trim_moves_group_lag({"redis_version": "8.0.0"})  # the change came with 8.0 (#13473, #13958)
    assert not flavours.trim_moves_group_lag({"redis_version": "7.4.1"})
