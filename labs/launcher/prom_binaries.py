"""Find ``prometheus``, ``promtool`` and the Redis exporter (Debian's ``prometheus-redis-exporter``).

``make setup`` installs them with apt-get as root on Debian/Ubuntu (``scripts/ensure-monitoring.sh``);
anywhere else :func:`install_hint` says in one sentence what to install, and the tests that need them
are skipped with that sentence.
"""

from __future__ import annotations

import shutil
import sys

from labs.launcher.errors import LauncherError

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
EXPORTERS = ("prometheus-redis-exporter", "redis_exporter")  # Debian's name, upstream's name


def install_hint() -> str:
    """How to get Prometheus (with promtool) and redis_exporter on this platform."""
    if sys.platform == "darwin":
        return "install them with 'brew install prometheus redis_exporter'"
    if shutil.which("apt-get"):
        return (
            "install them with 'sudo apt-get install --no-install-recommends prometheus "
            "prometheus-redis-exporter' (or run 'make setup' as root)"
        )
    return "install Prometheus >= 2.42 (with promtool) and redis_exporter >= 1.45 from your package manager"


def find(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; a clear error when it is missing."""
    path = shutil.which(name)
    if path is None:
        raise LauncherError(f"{name} not found on PATH: {install_hint()}")
    return path


def exporter() -> str:
    """The path of the Redis exporter under either of its names."""
    for name in EXPORTERS:
        if path := shutil.which(name):
            return path
    raise LauncherError(f"prometheus-redis-exporter (or redis_exporter) not found on PATH: {install_hint()}")


def missing() -> str:
    """'' when all three are installed, else one line naming what is missing and how to get it."""
    absent = [name for name in (PROMETHEUS, PROMTOOL) if shutil.which(name) is None]
    if not any(shutil.which(name) for name in EXPORTERS):
        absent.append(EXPORTERS[0])
    return f"{', '.join(absent)} not installed: {install_hint()}" if absent else ""
