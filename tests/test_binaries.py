"""Finding the Redis binaries, and the one line a person gets when they are missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labs.launcher import binaries
from labs.launcher.errors import LauncherError


def test_redis_is_at_least_7(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_BIN_DIR", raising=False)
    for name in binaries.BINARIES:
        path = binaries.require(name)
        assert binaries.version(path)[:2] >= (7, 0)


def test_missing_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REDIS", "redis7")  # the default flavour's names and hint (others: tests/test_flavours.py)
    monkeypatch.setenv("REDIS_BIN_DIR", str(tmp_path))
    with pytest.raises(LauncherError) as err:
        binaries.require("redis-server")
    assert "redis-server not found" in str(err.value) and "install" in str(err.value)
    assert "apt-get install redis-server" in str(err.value) or "brew" in str(err.value) or "conda" in str(err.value)
    assert "\n" not in str(err.value)


def test_too_old_redis_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'Redis server v=6.2.1 sha=0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("REDIS", "redis7")
    monkeypatch.setenv("REDIS_BIN_DIR", str(tmp_path))
    with pytest.raises(LauncherError, match=r"Redis 6\.2\.1, the labs need >= 7\.0"):
        binaries.require("redis-server")


def test_a_redis_binary_is_found_only_through_the_flavour() -> None:
    """labs.launcher.binaries is the one seam that finds redis-server: it follows the flavour (REDIS=valkey8,
    REDIS_BIN_DIR). Three experiments looked it up on PATH themselves, so under another flavour they ran
    Debian's Redis 7.0 beside the flavour's topology."""
    root = Path(__file__).resolve().parents[1]
    own = re.compile(r"""which\(\s*["'](redis|valkey)-""")
    seams = {"labs/launcher/binaries.py", "labs/launcher/flavours.py"}
    found = [str(p.relative_to(root)) for d in ("labs", "solutions") for p in (root / d).rglob("*.py")
             if str(p.relative_to(root)) not in seams and own.search(p.read_text(encoding="utf-8"))]
    assert found == [], f"find it with labs.launcher.binaries.require: {found}"
