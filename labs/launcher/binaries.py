"""Find ``redis-server``, ``redis-sentinel`` and ``redis-cli`` and check their version."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys

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
    """Return the path of a Redis binary; ``REDIS_BIN_DIR`` overrides ``PATH``."""
    bin_dir = os.environ.get("REDIS_BIN_DIR")
    path = shutil.which(name, path=bin_dir) if bin_dir else shutil.which(name)
    if path is None:
        raise LauncherError(f"{name} not found on PATH: {install_hint()}")
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
    """Find a binary and make sure it is Redis >= 7.0."""
    path = find(name)
    found = version(path)
    if found[:2] < MIN_VERSION:
        shown = ".".join(map(str, found))
        raise LauncherError(f"{path} is Redis {shown}, the labs need >= 7.0: {install_hint()}")
    return path
