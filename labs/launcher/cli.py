"""The launcher CLI that the Makefile calls: ``python -m labs up|status|failover|down``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rich.table import Table

from labs.launcher import broker_registry, brokers, monitoring_cli, netns, topologies
from labs.launcher.errors import LauncherError
from labs.launcher.ports import DEFAULTS
from labs.launcher.topology import TOPOLOGIES, TopologyStatus, default_run_dir
from labs.report import make_console

console = make_console()  # piped (make status | tee): no wrapping at 80 columns

EPILOG = "ports (override with the variable): " + ", ".join(f"{k}={v}" for k, v in DEFAULTS.items())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labs",
        description="Start, inspect, fail over and stop real Redis processes on 127.0.0.1.",
        epilog=EPILOG + f"; LAB_DOWN_AFTER_MS=1000; files under $LAB_RUN_DIR or {default_run_dir()}",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a topology, or reuse it when it already runs")
    up.add_argument("topology", choices=(*TOPOLOGIES, *brokers.BROKERS), nargs="?", default="single")
    up.add_argument("--netns", action="store_true",
                    help="sentinel, cluster: each process in a network namespace of its own (root; for partitions)")
    st = sub.add_parser("status", help="roles, ports, replication offsets, each sentinel's master")
    st.add_argument("topology", choices=(*TOPOLOGIES, *brokers.BROKERS, "all"), nargs="?", default="all")
    fo = sub.add_parser("failover", help="fail the sentinel topology (or the cluster) over and time it")
    fo.add_argument("topology", choices=("sentinel", "cluster"), nargs="?", default="sentinel")
    fo.add_argument(
        "--hard", action="store_true", help="kill -9 the master instead of SENTINEL FAILOVER (CLUSTER FAILOVER)"
    )
    fo.add_argument("--master-port", type=int, help="cluster: the master to replace (default: the one with slot 0)")
    fo.add_argument("--timeout-s", type=float, default=30.0, help="give up after this long (default 30)")
    fo.add_argument(
        "--no-restart", action="store_true", help="with --hard, leave the killed master down"
    )
    down = sub.add_parser("down", help="stop every process the launcher started")
    down.add_argument("topology", choices=(*TOPOLOGIES, *brokers.BROKERS, "all"), nargs="?", default="all")
    monitoring_cli.add_parser(sub)
    return parser


def _names(choice: str) -> tuple[str, ...]:
    return TOPOLOGIES if choice == "all" else tuple(n for n in (choice,) if n in TOPOLOGIES)


def _broker_names(choice: str) -> tuple[str, ...]:
    return brokers.BROKERS if choice == "all" else tuple(n for n in (choice,) if n in brokers.BROKERS)


def _print_broker_status(name: str) -> bool:
    cluster = brokers.from_env(name, default_run_dir())
    if not brokers.running(cluster):
        return False
    table = Table(title=f"broker {name}", title_justify="left")
    for col in ("process", "port", "pid", "role"):
        table.add_column(col)
    for row in brokers.status_rows(cluster):
        table.add_row(row.name, str(row.port), str(row.pid or "-"), row.detail)
    console.print(table)
    return True


def _print_status(st: TopologyStatus) -> None:
    table = Table(title=f"topology {st.topology}", title_justify="left")
    for col in ("process", "port", "pid", "role", "server", "repl offset", "detail"):
        table.add_column(col)
    for n in st.nodes:
        offset = "" if n.offset is None else str(n.offset)
        table.add_row(n.name, str(n.port), str(n.pid or "-"), n.role, n.server or "-", offset, n.detail)
    for s in st.sentinels:
        master = f"master at {s.master[0]}:{s.master[1]}" if s.master else "no answer"
        table.add_row(s.name, str(s.port), str(s.pid or "-"), "sentinel", s.server or "-", "", master)
    console.print(table)


def run(args: argparse.Namespace) -> int:
    if args.command == "monitoring":
        return monitoring_cli.run(args, console)
    if args.command == "up":
        return _up(args)
    if args.command == "status":
        return _status(args)
    if args.command == "failover" and args.topology == "cluster":
        return _failover_cluster(args)
    if args.command == "failover":
        topo = topologies.from_env("sentinel")
        kind = "kill -9 of the master" if args.hard else "SENTINEL FAILOVER"
        console.print(f"failover by {kind} ...")
        result = topo.failover(hard=args.hard, timeout_s=args.timeout_s, restart_old=not args.no_restart)
        old, new = result.old_master, result.new_master
        console.print(
            f"promoted {new[0]}:{new[1]} (was {old[0]}:{old[1]}) in {result.elapsed_s:.2f} s, "
            "as reported by a quorum of sentinels"
        )
        if args.hard and not args.no_restart:
            console.print(f"restarted {old[0]}:{old[1]}; the sentinels made it a replica of {new[0]}:{new[1]}")
        return 0
    if args.topology == "all":
        monitoring_cli.stop_if_running(console)
    stopped: list[int] = []
    for name in _names(args.topology):
        stopped += topologies.from_env(name).stop()
    for name in _broker_names(args.topology):
        stopped += brokers.from_env(name, default_run_dir()).stop()
    # and those of comparisons and notebooks, wherever their files are (labs.launcher.broker_registry)
    stopped += broker_registry.stop_registered(None if args.topology == "all" else _broker_names(args.topology))
    console.print(f"stopped {len(stopped)} process(es)" + (f": pids {stopped}" if stopped else ""))
    if args.topology == "all" and (removed := netns.remove_registered()):
        console.print(f"removed {len(removed)} network namespace(s) left by partition runs of this checkout")
    return 0


def _status(args: argparse.Namespace) -> int:
    shown = [status for name in _names(args.topology) if (status := topologies.from_env(name).status()).running]
    for status in shown:
        _print_status(status)
    brokers_shown = [name for name in _broker_names(args.topology) if _print_broker_status(name)]
    monitoring_cli.print_status(console)
    _print_namespaces()
    _print_registered()
    if not shown and not brokers_shown:
        console.print(
            "no topology is running "
            "(start one with 'make up', 'make up-aof', 'make up-sentinel', 'make up-cluster', "
            "'make up-rabbitmq' or 'make up-nats')"
        )
    return 0


def _print_registered() -> None:
    """Broker processes of comparisons and notebooks (labs.launcher.broker_registry), wherever their files are."""
    live = [e for _p, e in broker_registry.entries() if e.alive()]
    by_kind: dict[str, list[int]] = {}
    for entry in live:
        by_kind.setdefault(entry.kind, []).append(entry.pid)
    for kind, pids in sorted(by_kind.items()):
        console.print(f"{kind} processes started by comparisons or notebooks: {len(pids)} (pids {pids}); "
                      "'make down' stops them")


def _print_namespaces() -> None:
    """The workbook's network namespaces (partition runs), this checkout's and any other session's."""
    for run_id, names in netns.leftovers().items():
        console.print(f"network namespaces of run {run_id}: {len(names)} ({', '.join(names[:3])} ...)")


def _up(args: argparse.Namespace) -> int:
    if args.topology in brokers.BROKERS:
        cluster = brokers.from_env(args.topology, default_run_dir())
        verb = "reused" if all(p.pid() for p in cluster.processes) else "started"
        slow = " (Erlang and the cluster's forming take up to a minute)" if args.topology == "rabbitmq" else ""
        console.print(f"{args.topology}: starting 3 nodes{slow} ..." if verb == "started"
                      else f"{args.topology}: already running")
        urls = cluster.ensure()
        kind = "quorum queue" if args.topology == "rabbitmq" else "JetStream stream"
        console.print(f"{args.topology}: {verb}; {', '.join(urls)}; {kind} 'orders' with 3 replicas, "
                      f"leader on port {cluster.leader_port()}")
        return 0
    topo = topologies.from_env(args.topology, netns=args.netns)
    before = [p.pid() for p in topo.processes]
    addrs = topo.ensure()
    verb = "reused" if all(before) else "started"
    where = "node" if args.topology == "cluster" else "master"
    console.print(f"{args.topology}: {verb}; {where} {addrs.url}")
    if args.topology == "cluster":
        console.print(f"cluster nodes {', '.join(map(str, addrs.ports))}; 'make status' shows the slots")
    if addrs.sentinels:
        listed = ", ".join(f"{h}:{p}" for h, p in addrs.sentinels)
        console.print(f"sentinels {listed}, master name {addrs.master_name}")
    monitoring_cli.refresh_if_running(console)
    return 0


def _failover_cluster(args: argparse.Namespace) -> int:
    topo = topologies.from_env("cluster")
    kind = "kill -9 of a master" if args.hard else "CLUSTER FAILOVER on a replica"
    console.print(f"cluster failover by {kind} ...")
    result = topo.failover(
        hard=args.hard, timeout_s=args.timeout_s, restart_old=not args.no_restart, master_port=args.master_port
    )
    old, new = result.old_master[1], result.new_master[1]
    slots = ", ".join(f"{lo}-{hi}" for lo, hi in result.slots)
    console.print(f"{new} serves slots {slots} (was {old}) after {result.elapsed_s:.2f} s; every node says ok")
    if result.ready_s is not None:
        console.print(f"{old} is a linked replica of {new}; cluster ready again after {result.ready_s:.2f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except LauncherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
