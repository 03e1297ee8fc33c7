"""``python -m labs monitoring up|down|status|rules`` and the monitoring part of ``status`` and ``down``."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from rich import box
from rich.console import Console
from rich.table import Table

from labs.launcher import promtool
from labs.launcher.errors import LauncherError
from labs.launcher.monitoring import Monitoring
from labs.launcher.rule_scale import MONITORING_DIR
from labs.launcher.topology import TOPOLOGIES


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mon = sub.add_parser("monitoring", help="exporters and Prometheus for the running topologies")
    mon.add_argument("action", choices=("up", "down", "status", "rules"), help="rules: promtool, both scales")
    mon.add_argument("--topology", choices=TOPOLOGIES, action="append", help="watch only this topology (repeatable)")
    mon.add_argument("--timeout-s", type=float, default=30.0, help="wait this long for every target to be up")


def run(args: argparse.Namespace, console: Console) -> int:
    mon = Monitoring.from_env()
    if args.action == "up":
        addrs = mon.ensure(args.topology)
        console.print(f"monitoring {', '.join(addrs.topologies)}: Prometheus {addrs.prometheus_url} "
                      f"(rules scaled by {mon.scale.factor:g}), {len(addrs.exporters)} exporter(s)")
        mon.wait_targets_up(args.timeout_s)
        print_status(console, mon)
        return 0
    if args.action == "down":
        stopped = mon.stop()
        console.print(f"monitoring: stopped {len(stopped)} process(es)" + (f": pids {stopped}" if stopped else ""))
        return 0
    if args.action == "status":
        if not print_status(console, mon):
            console.print("monitoring is not running (start it with 'make up-monitoring')")
        return 0
    return _rules(console)


def _rules(console: Console) -> int:
    with tempfile.TemporaryDirectory(prefix="lab-rules-") as tmp:
        runs = promtool.verify(Path(tmp))
    root = str(MONITORING_DIR.parent) + "/"
    for r in runs:
        console.print(f"{'ok  ' if r.ok else 'FAIL'} {r.what.replace(tmp, '<lab copy>').replace(root, '')}")
        if not r.ok:
            console.print(r.output)
    return 0 if all(r.ok for r in runs) else 1


def print_status(console: Console, mon: Monitoring | None = None) -> bool:
    """The targets' health and the firing alerts; False when monitoring does not run."""
    mon = mon or Monitoring.from_env()
    if not mon.running():
        return False
    for line in mon.problems():
        console.print(f"[red]error:[/red] {line}")
    mon.discover_workers()
    try:
        targets, alerts = mon.targets(), mon.api.alerts()
    except LauncherError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return True
    table = Table(title=f"monitoring: Prometheus {mon.url}", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("job", "topology / worker", "scraped at"):
        table.add_column(col, no_wrap=True)
    table.add_column("health", overflow="fold")
    for t in sorted(targets, key=lambda t: (t.job, t.labels.get("topology", ""), t.url)):
        who = " ".join(filter(None, (t.labels.get("topology"), t.labels.get("node")))) or t.labels.get("worker", "")
        health = f"[green]{t.health}[/green]" if t.health == "up" else f"[red]{t.health}[/red] {_short(t.last_error)}"
        table.add_row(t.job, who, urlsplit(t.url).netloc, health.strip())
    console.print(table)
    for a in alerts:
        where = a.labels.get("node") or a.labels.get("stream") or a.labels.get("instance", "")
        console.print(f"alert {a.name} ({a.severity}) {a.state} on {where}")
    return True


def _short(error: str) -> str:
    """What a scrape error means, in a few words (the whole text is in Prometheus's /targets page)."""
    lowered = error.lower()
    for phrase, short in (("refused", "(refused)"), ("deadline", "(timeout)"), ("timeout", "(timeout)")):
        if phrase in lowered:
            return short
    return error.rsplit(": ", 1)[-1][:40]


def stop_if_running(console: Console) -> None:
    """``make down``: monitoring goes first, so that no exporter logs errors about the Redis going away."""
    mon = Monitoring.from_env()
    if mon.running():
        stopped = mon.stop()
        console.print(f"monitoring: stopped {len(stopped)} process(es)")


def refresh_if_running(console: Console) -> None:
    """After ``up <topology>``: a running monitoring add-on starts watching it too."""
    mon = Monitoring.from_env()
    if mon.running():
        addrs = mon.ensure()
        console.print(f"monitoring now watches {', '.join(addrs.topologies)}")
