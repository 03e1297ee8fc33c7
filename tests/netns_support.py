"""Partition tests: one skip reason (labs.launcher.netns.unavailable_reason), one small fabric fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from labs.launcher import netns


def skip_without_netns() -> None:
    """Skip the calling test with the one line that says why partitions cannot run here.

    Every partition test skips through this function, so that a switch making such skips
    failures (``LAB_REQUIRE=all`` in CI) has one place to hook.
    """
    if (reason := netns.unavailable_reason()) is not None:
        pytest.skip(f"partitions: {reason}")


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
