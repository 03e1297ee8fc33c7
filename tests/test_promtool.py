"""labs.launcher.promtool: the rules pass promtool check and test, at the production scale and in the lab copy.

Also: every alert carries for:, a severity, a summary and a "False alarm:" comment; every alert has
a promtool case where it fires and one where it stays quiet; and the quiet cases have teeth: the
community rules they replace (maxmemory ratio without a guard, "connected_slaves dropped", a bare
consumer-idle rule) fail them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from require_support import tagged

from labs.launcher import prom_binaries
from labs.launcher.promtool import check_and_test, verify
from labs.launcher.rule_scale import MONITORING_DIR

# Only the tests that run promtool need it; the ones that read the YAML run everywhere.
needs_promtool = pytest.mark.skipif(bool(prom_binaries.missing()),
                                    reason=tagged("monitoring", prom_binaries.missing() or "ok"))

RULE_FILES = sorted((MONITORING_DIR / "rules").glob("*.yml"))
TEST_FILES = sorted((MONITORING_DIR / "tests").glob("*.yml"))


def _alerts() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, rule)
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


@needs_promtool
def test_rules_pass_promtool_at_both_scales(tmp_path: Path) -> None:
    runs = verify(tmp_path / "lab")
    assert len(runs) == 4
    for run in runs:
        assert run.ok, f"{run.what}\n{run.output}"
    assert "SUCCESS" in runs[1].output and "SUCCESS" in runs[3].output


def test_every_alert_has_for_severity_summary_and_a_false_alarm_comment() -> None:
    alerts = _alerts()
    assert len(alerts) >= 17
    for path, rule in alerts:
        name = rule["alert"]
        assert "for" in rule, f"{name} has no for:"
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"], name
        text = path.read_text()
        block = text[: text.index(f"- alert: {name}\n")].rsplit("\n\n", 1)[-1]
        assert "False alarm:" in block, f"{name}: no 'False alarm:' comment above it"


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {rule["alert"] for _, rule in _alerts()}
    assert names <= firing, f"never fire in a test: {sorted(names - firing)}"
    assert names <= quiet, f"never quiet in a test: {sorted(names - quiet)}"


# The community rules the quiet cases were written against (awesome-prometheus-alerts style).
NAIVE = {  # alert: (the false alarm, what to replace in its rule, the community version)
    "RedisMemoryHigh": (
        "maxmemory 0",
        r"(\(redis_memory_used_bytes - [^\n]+\n)\s+and on \(instance\) redis_memory_max_bytes > 0\n",
        r"\1",
    ),
    "RedisReplicationLinkDown": (
        "planned failover",
        r"expr: redis_master_link_up == 0\n        for: 2m",
        "expr: delta(redis_connected_slaves[1m]) < 0\n        for: 0s",
    ),
    "RedisFragmented": (
        "after a peak (RSS kept, nothing fragmented)",
        r"redis_allocator_frag_ratio > 1\.5\n\s+and on \(instance\) redis_allocator_frag_bytes > [^\n]+\n",
        "redis_mem_fragmentation_ratio > 1.5\n",
    ),
    "StreamNoLiveConsumer": (
        "quiet stream",
        r"expr: \|\n          stream_group:lag_entries > 0\n          unless[^\n]*\n[^\n]*\n",
        "expr: |\n          stream_group:consumer_idle_min_seconds > 120\n",
    ),
}


@needs_promtool
@pytest.mark.parametrize("alert", sorted(NAIVE))
def test_the_quiet_cases_fail_the_community_rule(alert: str, tmp_path: Path) -> None:
    case, pattern, naive = NAIVE[alert]
    shutil.copytree(MONITORING_DIR, tmp_path, dirs_exist_ok=True)
    for path in (tmp_path / "rules").glob("*.yml"):
        text = path.read_text()
        if f"- alert: {alert}\n" in text:
            changed, n = re.subn(pattern, naive, text)
            assert n >= 1, f"the pattern for {alert} no longer matches {path.name}"
            path.write_text(changed)
    check, test = check_and_test(tmp_path)
    assert check.ok, check.output
    assert not test.ok, f"the {case} case did not catch the naive {alert}"
    assert f"alertname: {alert}" in test.output


@needs_promtool
def test_the_trimmed_stream_case_fails_a_rule_that_trusts_the_reported_lag(tmp_path: Path) -> None:
    """Without the caught-up guard, Redis's lag after a trim past the cursor (7.0: still > 0) raises alerts."""
    shutil.copytree(MONITORING_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "rules" / "streams.yml"
    text = path.read_text()
    guard = "          unless on (instance, stream, group) stream_group:caught_up == 1\n"
    assert guard in text
    path.write_text(text.replace(guard, "          unless on (instance, stream, group) vector(0) == 1\n"))
    check, test = check_and_test(tmp_path)
    assert check.ok, check.output
    assert not test.ok and "trimmed past the group's cursor, then read to its end" in test.output
    assert "alertname: StreamNoLiveConsumer" in test.output and "alertname: BillingWorkerDown" in test.output
