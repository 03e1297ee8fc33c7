"""Find ``redis-server``, ``redis-sentinel`` and ``redis-cli`` of the server flavour and check their version.

The flavour (``REDIS=redis7|valkey8|redis8``, see :mod:`labs.launcher.flavours`) says which file a
role is (``valkey-server`` for Valkey) and where it lives; ``REDIS_BIN_DIR`` overrides that directory.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys

from labs.launcher import flavours
from labs.launcher.errors import LauncherError

MIN_VERSION = (7, 0)
BINARIES = ("redis-server", "redis-sentinel", "redis-cli")


def install_hint() -> str:
    """Say how to get Redis >= 7.0 on this platform, in one sentence."""
    if sys.platform == "darwin":
        return "install it with 'brew install redis' (or 'conda env create -f environment.yml')"
    if shutil.which("apt-get"):
        return (
            "install it with 'sudo apt-get install redis-server redis-sentinel redis-tools' "
            "(or 'conda env create -f environment.yml')"
        )
    return "install Redis >= 7.0 from your package manager or 'conda env create -f environment.yml'"


def find(name: str) -> str:
    """The path of the flavour's binary for the role ``name``; ``REDIS_BIN_DIR`` overrides its directory."""
    flavour = flavours.current()
    file_name = flavour.file_name(name)
    bin_dir = os.environ.get("REDIS_BIN_DIR") or flavour.search_path(name)
    path = shutil.which(file_name, path=bin_dir) if bin_dir else shutil.which(file_name)
    if path is None:
        where = f"in {bin_dir}" if bin_dir else "on PATH"
        hint = install_hint() if flavour.name == flavours.DEFAULT_FLAVOUR else flavour.install_hint()
        raise LauncherError(f"{file_name} not found {where} ({flavours.FLAVOUR_VAR}={flavour.name}): {hint}")
    return path


@functools.cache
def version(path: str) -> tuple[int, int, int]:
    """Parse ``redis-server --version`` (``Redis server v=7.0.15 ...``)."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out) or re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if match is None:
        raise LauncherError(f"cannot read the version of {path}: {out.strip()!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def require(name: str) -> str:
    """Find a binary and make sure it is the flavour's product at its least version (Redis >= 7.0 by default)."""
    path = find(name)
    flavour = flavours.current()
    found = version(path)
    if found[:2] < flavour.least_version(name):
        shown = ".".join(map(str, found))
        least = ".".join(map(str, flavour.least_version(name)))
        hint = install_hint() if flavour.name == flavours.DEFAULT_FLAVOUR else flavour.install_hint()
        raise LauncherError(f"{path} is {flavour.product} {shown}, the labs need >= {least}: {hint}")
    return path
