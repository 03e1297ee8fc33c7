"""``LAB_REQUIRE``: where a whole area of the suite may not be skipped (CI sets ``LAB_REQUIRE=all``).

A test that cannot run because a part of the machine is missing (no Chromium, no Prometheus, no
loop devices for the store outage, no network namespaces, no Redis at all) skips through
:func:`skip_area` (or marks itself with ``skipif(..., reason=tagged(area, why))``): the reason is
tagged ``[area]``. Locally that is an ordinary skip with its one line. With ``LAB_REQUIRE=all``
(or a comma list of areas, ``LAB_REQUIRE=browser,netns``) ``tests/conftest.py`` turns such a skip
into a failure, so a CI machine that lost a part fails instead of passing with a hole in it.
A skip that is not about the machine (a filesystem without ``chattr``) stays untagged.
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

import pytest

REQUIRE_VAR = "LAB_REQUIRE"
AREAS = ("redis", "browser", "monitoring", "store-outage", "netns", "brokers")
_TAG = re.compile(r"\[([a-z-]+)\] ")


def tagged(area: str, reason: str) -> str:
    """The reason of a skip of ``area`` (one of :data:`AREAS`), as :func:`required_failure` reads it."""
    if area not in AREAS:
        raise ValueError(f"unknown test area {area!r}; choose one of {', '.join(AREAS)}")
    return f"[{area}] {reason}"


def skip_area(area: str, reason: str) -> NoReturn:
    """Skip this test because ``area`` cannot run on this machine (a failure where it is required)."""
    pytest.skip(tagged(area, reason))


def required_areas(value: str | None = None) -> set[str]:
    """The areas ``LAB_REQUIRE`` names: ``all``, a comma list, or none (unset or empty)."""
    raw = os.environ.get(REQUIRE_VAR, "") if value is None else value
    names = {part.strip() for part in raw.split(",") if part.strip()}
    if "all" in names:
        return set(AREAS)
    unknown = names - set(AREAS)
    if unknown:
        raise pytest.UsageError(f"{REQUIRE_VAR}={raw!r}: unknown area(s) {', '.join(sorted(unknown))}; "
                                f"use 'all' or some of {', '.join(AREAS)}")
    return names


def required_failure(reason: str, required: set[str]) -> str | None:
    """The failure message when a skip with this ``reason`` hides a required area, else None."""
    match = _TAG.search(reason)
    if match is None or match[1] not in required:
        return None
    return f"{REQUIRE_VAR} requires the {match[1]} area, but it was skipped: {reason[match.start():]}"


def fail_required_skip(report: pytest.TestReport, required: set[str]) -> bool:
    """Turn ``report`` (a skip of a required area) into a failure, in place; True when it did."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return False
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    failure = required_failure(reason, required)
    if failure is None:
        return False
    report.outcome = "failed"
    report.longrepr = failure
    return True
