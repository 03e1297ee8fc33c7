"""tests/require_support.py: LAB_REQUIRE turns a skip of a required area into a failure, and nothing else."""

from __future__ import annotations

import pytest
from require_support import fail_required_skip, required_areas, tagged


def _skipped(reason: str) -> pytest.TestReport:
    return pytest.TestReport("t.py::x", ("t.py", 0, "x"), {}, "skipped", ("t.py", 1, f"Skipped: {reason}"), "call")


def test_the_switch_names_all_areas_or_some() -> None:
    assert required_areas("") == set()
    assert required_areas("all") >= {"browser", "monitoring", "store-outage", "netns", "redis"}
    assert required_areas("browser, netns") == {"browser", "netns"}
    with pytest.raises(pytest.UsageError, match="unknown area"):
        required_areas("brwoser")
    with pytest.raises(ValueError, match="unknown test area"):
        tagged("gpu", "no GPU")


def test_a_required_area_skip_fails_in_one_line() -> None:
    report = _skipped(tagged("browser", "no /usr/bin/chromium"))
    assert fail_required_skip(report, required_areas("all"))
    assert report.failed and report.longrepr == (
        "LAB_REQUIRE requires the browser area, but it was skipped: [browser] no /usr/bin/chromium")


def test_other_skips_stay_skips() -> None:
    untagged = _skipped("chattr +i is not supported on this filesystem")
    assert not fail_required_skip(untagged, required_areas("all")) and untagged.skipped
    not_required = _skipped(tagged("netns", "not root"))
    assert not fail_required_skip(not_required, required_areas("browser")) and not_required.skipped
    assert not fail_required_skip(not_required, required_areas("")) and not_required.skipped
