"""Partition tests: one skip reason (labs.launcher.netns.unavailable_reason), one small fabric fixture."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from require_support import skip_area

from labs.launcher import netns


def skip_without_netns() -> None:
    """Skip the calling test with the one line that says why partitions cannot run here.

    Every partition test skips through this function: the ``netns`` area of
    ``tests/require_support.py``, a failure under ``LAB_REQUIRE=all`` (or ``netns``).
    """
    if (reason := netns.unavailable_reason()) is not None:
        skip_area("netns", f"partitions: {reason}")


def own_namespaces() -> set[str]:
    """The namespaces of fabrics this process made (run id ``<pid>x<hex>``): what a test may expect gone after
    its run. Other xdist workers and notebooks make and remove theirs meanwhile, so the whole list before and
    after a run differ without any leak."""
    return {name for name in netns.list_namespaces() if name.startswith(f"{netns.PREFIX}-{os.getpid()}x")}


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[netns.Fabric]:
    """Members ``a``, ``b``, ``c`` in namespaces of their own, destroyed afterwards."""
    skip_without_netns()
    made = netns.Fabric.plan(tmp_path / "fabric", ["a", "b", "c"])
    try:
        made.up()
        yield made
    finally:
        made.destroy()
