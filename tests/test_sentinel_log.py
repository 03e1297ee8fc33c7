"""labs.experiments.sentinel_log: Sentinel's events on its own clock, from its log lines."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from labs.experiments import failover_window, sentinel_log

LINES = [
    "12424:X 07 Dec 2026 02:08:45.337 # oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo",
    "12424:X 07 Dec 2026 02:08:48.931 # +switch-master mymaster 127.0.0.1 15424 127.0.0.1 14044",
    "12424:X 07 Dec 2026 02:08:48.931 * +slave slave 127.0.0.1:15424 127.0.0.1 15424 @ mymaster 127.0.0.1 14044",
    "12424:X 07 Dec 2026 02:08:50.002 # +tilt #tilt mode entered",
    "12424:X 07 Dec 2026 02:08:58.971 * +convert-to-slave slave 127.0.0.1:15424 127.0.0.1 15424 @ mymaster ...",
]


def _wall(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def test_a_line_gives_its_event_at_the_sentinels_own_millisecond() -> None:
    event = sentinel_log.parse_line(LINES[-1])
    assert event is not None and event.event == "+convert-to-slave"
    assert event.at_wall_s == pytest.approx(_wall("2026-12-07 02:08:58.971"), abs=1e-6)
    assert sentinel_log.parse_line(LINES[2]) is None  # +slave is not watched
    assert sentinel_log.parse_line("not a log line") is None


def test_the_events_since_a_moment_and_their_first_sights(tmp_path: Path) -> None:
    since = _wall("2026-12-07 02:08:46.000")
    logfile = tmp_path / "sentinel.log"
    logfile.write_text("\n".join(LINES) + "\n")
    logged = sentinel_log.read_events(logfile, since)
    assert [e.event for e in logged] == ["+switch-master", "+tilt", "+convert-to-slave"]
    first = sentinel_log.first_sights(logged, since)
    assert first["+convert-to-slave"] - first["+switch-master"] == pytest.approx(10.040, abs=1e-3)
    assert sentinel_log.read_events(tmp_path / "missing.log", since) == []


def test_each_event_keeps_what_it_is_about_and_a_filter_drops_another_servers_conversion() -> None:
    other = "12424:X 07 Dec 2026 02:08:47.100 * +convert-to-slave slave 127.0.0.1:14044 127.0.0.1 14044 @ mymaster x"
    since = _wall("2026-12-07 02:08:46.000")
    logged = sentinel_log.events([other, *LINES], since)
    assert logged[0].detail.startswith("slave 127.0.0.1:14044 ")
    # the first conversion in the log is of another server (a replica re-converted late): not this failover's
    keep = failover_window.about_old_master(("127.0.0.1", 15424))
    first = sentinel_log.first_sights(logged, since, keep)
    assert first["+convert-to-slave"] == pytest.approx(_wall("2026-12-07 02:08:58.971") - since, abs=1e-3)
    assert sentinel_log.first_sights(logged, since)["+convert-to-slave"] == pytest.approx(1.1, abs=1e-3)
