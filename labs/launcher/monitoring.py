"""The monitoring add-on: one redis_exporter per Redis node of the running topologies, one Prometheus.

>>> from labs.launcher.monitoring import Monitoring
>>> mon = Monitoring.from_env()
>>> addrs = mon.ensure()                     # exporters + Prometheus for every running topology
>>> mon.wait_targets_up()                    # every target scraped and up
>>> mon.register_worker(WorkerTarget(name="w1", port=9500, consumer="w1"))
>>> mon.api.firing()                         # /api/v1/alerts
>>> mon.stop()

Everything runs on 127.0.0.1 and lives under ``<run_dir>/monitoring/``: prometheus.yml, the lab
copy of the rules (``rules/``, generated from ``monitoring/rules`` by :mod:`~labs.launcher.rule_scale`),
the exporters' collect script, the workers' service discovery files (``workers/``), the TSDB
(``data/``, retention 2 h), pid files and logs.

| what | default | variable |
|---|---|---|
| Prometheus | 9390 | ``LAB_PROMETHEUS_PORT`` |
| exporters | 9391+ (a slot per node of every topology) | ``LAB_EXPORTER_PORTS`` (first port, or a list) |
| time scale of the lab rules | 60 (minutes become seconds; 1 = production) | ``LAB_MONITORING_TIME_SCALE`` |
| streams to inspect | ``*orders``, ``*orders:dlq`` and cluster shards ``*orders:{*}`` | ``LAB_MONITORING_STREAMS`` |

A topology supplies its nodes through :func:`topology_nodes` (its ``servers`` and ``sentinels``),
so a new topology needs nothing here; a cluster's exporters get ``-is-cluster``. The add-on knows
the topologies it may watch from its ``catalog`` (by default every topology on its configured
ports; tests pass topologies on free ports instead).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from labs.launcher import ports, prom_binaries, topologies, worker_targets
from labs.launcher.errors import LauncherError
from labs.launcher.prom_api import PrometheusAPI, Target
from labs.launcher.prom_config import ExporterTarget, collect_script, prometheus_config
from labs.launcher.rule_scale import TimeScale, format_duration, write_lab_copy
from labs.launcher.service import ServiceProcess
from labs.launcher.topology import TOPOLOGIES, Topology, default_run_dir
from labs.launcher.worker_targets import WorkerTarget
from labs.polling import poll_value

log = logging.getLogger(__name__)

PROMETHEUS_PORT_VAR = ports.PROMETHEUS_PORT_VAR
EXPORTER_PORTS_VAR = ports.EXPORTER_PORTS_VAR
TIME_SCALE_VAR = "LAB_MONITORING_TIME_SCALE"
STREAMS_VAR = "LAB_MONITORING_STREAMS"
DEFAULTS = {TIME_SCALE_VAR: "60", STREAMS_VAR: "*orders,*orders:dlq,*orders:{*},*orders:{*}:dlq"}
RETENTION = "2h"
# Prometheus's lookback delta: how far back an instant selector (and "offset") still finds a
# series' last sample. It is a time window like the rules' and is scaled with them: at the
# production 5 min, the samples of a Redis and a Prometheus stopped and started again a minute
# ago (make down, make up-*) still look current in the lab's 8-second world, and an OOM count of
# the new life equal to the old one hid the first-OOM alert.
LOOKBACK_S = 300.0
EXPORTER_CONNECT_TIMEOUT = "1s"  # a stalled Redis shows as redis_up 0 within a scrape


@dataclass(frozen=True)
class ScrapeNode:
    """One Redis process an exporter watches."""

    topology: str
    port: int
    sentinel: bool
    cluster: bool


def topology_nodes(topo: Topology) -> list[ScrapeNode]:
    """The nodes of a topology, servers first: what the add-on needs to know about any topology."""
    cluster = topo.name == "cluster"
    return [ScrapeNode(topo.name, p.port, False, cluster) for p in topo.servers] + [
        ScrapeNode(topo.name, p.port, True, False) for p in topo.sentinels
    ]


@dataclass(frozen=True)
class MonitoringAddresses:
    prometheus_url: str
    exporters: dict[int, str]  # Redis node port -> exporter /metrics URL
    topologies: tuple[str, ...]


def _env(var: str) -> str:
    return os.environ.get(var) or DEFAULTS[var]


@dataclass
class Monitoring:
    """The add-on's files and processes under ``home``. Build it with :meth:`from_env`."""

    home: Path
    catalog: list[Topology]
    prometheus_port: int
    exporter_ports: list[int]
    streams: tuple[str, ...] = tuple(DEFAULTS[STREAMS_VAR].split(","))
    scale: TimeScale = field(default_factory=TimeScale)

    @classmethod
    def from_env(cls, run_dir: Path | None = None) -> Monitoring:
        run = Path(run_dir or default_run_dir()).resolve()
        raw_scale = _env(TIME_SCALE_VAR)
        try:
            scale = TimeScale(factor=float(raw_scale))
        except ValueError:
            raise LauncherError(f"{TIME_SCALE_VAR}={raw_scale!r} is not a number") from None
        streams = tuple(s.strip() for s in _env(STREAMS_VAR).split(",") if s.strip())
        if not streams:
            raise LauncherError(f"{STREAMS_VAR} lists no stream pattern")
        prom_port = ports.from_env(PROMETHEUS_PORT_VAR)[0]
        catalog = [topologies.from_env(name, run) for name in TOPOLOGIES]
        return cls(run / "monitoring", catalog, prom_port, ports.from_env(EXPORTER_PORTS_VAR), streams, scale)

    # -- layout ---------------------------------------------------------------------------

    @property
    def rules_dir(self) -> Path:
        return self.home / "rules"

    @property
    def workers_dir(self) -> Path:
        return self.home / "workers"

    @property
    def config_path(self) -> Path:
        return self.home / "prometheus.yml"

    @functools.cached_property
    def script(self) -> str:
        """The exporters' collect script for ``streams`` (read from the repository once)."""
        return collect_script(self.streams)

    @property
    def script_path(self) -> Path:
        """The collect script, named after its content: a changed script changes the exporters' flags."""
        digest = hashlib.sha256(self.script.encode()).hexdigest()[:10]
        return self.home / f"stream_metrics-{digest}.lua"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def api(self) -> PrometheusAPI:
        return PrometheusAPI(self.url)

    def slots(self) -> list[ScrapeNode]:
        """Every node of every topology of the catalog, in a fixed order: slot i is exporter port i."""
        return [node for topo in self.catalog for node in topology_nodes(topo)]

    def topology(self, name: str) -> Topology:
        for topo in self.catalog:
            if topo.name == name:
                return topo
        raise LauncherError(f"unknown topology {name!r}; choose one of {', '.join(t.name for t in self.catalog)}")

    def exporter_port(self, node: ScrapeNode) -> int:
        index = self.slots().index(node)
        if len(self.exporter_ports) == 1:
            return self.exporter_ports[0] + index
        if index >= len(self.exporter_ports):
            raise LauncherError(f"{EXPORTER_PORTS_VAR} lists {len(self.exporter_ports)} ports, slot {index} needs more")
        return self.exporter_ports[index]

    def exporter(self, node: ScrapeNode, port: int | None = None) -> ServiceProcess:
        """The exporter process of one node (``-check-streams`` and the collect script for servers)."""
        port = self.exporter_port(node) if port is None else port
        argv = [
            prom_binaries.exporter(),
            "-redis.addr", f"redis://127.0.0.1:{node.port}",
            "-web.listen-address", f"127.0.0.1:{port}",
            "-connection-timeout", EXPORTER_CONNECT_TIMEOUT,
            "-redis-only-metrics",
        ]
        if not node.sentinel:
            argv += ["-check-streams", ",".join(self.streams), "-script", str(self.script_path)]
        if node.cluster:
            argv.append("-is-cluster")
        return ServiceProcess(f"exporter-{node.port}", port, self.home, tuple(argv), "/metrics")

    def prometheus(self) -> ServiceProcess:
        argv = (
            prom_binaries.find(prom_binaries.PROMETHEUS),
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.home / 'data'}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--query.lookback-delta={format_duration(self.scale.window_s(LOOKBACK_S))}",
            f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            "--web.enable-lifecycle",
        )
        return ServiceProcess("prometheus", self.prometheus_port, self.home, argv, "/-/ready")

    # -- lifecycle --------------------------------------------------------------------------

    def running_topologies(self) -> list[str]:
        return [topo.name for topo in self.catalog if any(p.pid() for p in topo.processes)]

    def ensure(self, topologies: list[str] | None = None) -> MonitoringAddresses:
        """Start (or reuse, or bring up to date) the exporters and Prometheus for these topologies.

        By default every running topology. Exporters of nodes no longer watched are stopped; a
        running Prometheus reloads its config (SIGHUP).
        """
        names = topologies or self.running_topologies()
        if not names:
            raise LauncherError("no topology is running: start one first ('make up', 'make up-sentinel', ...)")
        nodes = [n for name in names for n in topology_nodes(self.topology(name))]
        wanted = {n.port: self.exporter(n) for n in nodes}
        self._write_files(
            [ExporterTarget(self.exporter_port(n), n.topology, n.port, n.sentinel) for n in nodes]
        )
        self._stop_unwanted({e.name for e in wanted.values()})
        for exporter in wanted.values():
            if exporter.pid() is not None and not exporter.runs_current_argv():
                exporter.kill()  # its flags changed (other streams, say): start it again
        prom = self.prometheus()
        to_start = [(s, EXPORTER_PORTS_VAR) for s in wanted.values() if s.pid() is None]
        to_start += [(prom, PROMETHEUS_PORT_VAR)] if prom.pid() is None else []
        for service, var in to_start:  # all or nothing: no exporter left behind by a busy Prometheus port
            if ports.in_use(service.port):
                raise LauncherError(
                    f"port {service.port} ({service.name}) is in use by another process; set {var} to a free port"
                )
        for exporter in wanted.values():
            if exporter.pid() is None:
                exporter.start(EXPORTER_PORTS_VAR)
        self.discover_workers(nodes)
        if prom.pid() is None:
            prom.start(PROMETHEUS_PORT_VAR)
        else:
            prom.send(signal.SIGHUP)
        return MonitoringAddresses(self.url, {p: f"{e.url}/metrics" for p, e in wanted.items()}, tuple(names))

    def _write_files(self, exporters: list[ExporterTarget]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.workers_dir.mkdir(exist_ok=True)
        for old in self.rules_dir.glob("*.yml") if self.rules_dir.exists() else []:
            old.unlink()
        write_lab_copy(self.home, self.scale)
        for old in self.home.glob("stream_metrics*.lua"):
            old.unlink()
        self.script_path.write_text(self.script)
        self.config_path.write_text(
            prometheus_config(
                prometheus_port=self.prometheus_port, exporters=exporters,
                rules_dir=self.rules_dir, workers_dir=self.workers_dir,
            )
        )

    def _services(self) -> list[ServiceProcess]:
        """Every process this add-on has a pid file for (whatever the ports are now)."""
        found = sorted(self.home.glob("*.pid")) if self.home.exists() else []
        binary = {"prometheus": prom_binaries.PROMETHEUS}
        return [
            ServiceProcess(p.stem, 0, self.home, (binary.get(p.stem, prom_binaries.EXPORTERS[0]),)) for p in found
        ]

    def _stop_unwanted(self, wanted: set[str]) -> None:
        for service in self._services():
            if service.name.startswith("exporter-") and service.name not in wanted:
                service.kill()

    def stop(self) -> list[int]:
        """Stop Prometheus and every exporter by pid; the pids stopped. Worker registrations go too."""
        stopped = [pid for s in self._services() if (pid := s.kill()) is not None]
        for name in worker_targets.registered(self.workers_dir):
            worker_targets.unregister(self.workers_dir, name)
        return stopped

    def running(self) -> bool:
        return any(s.pid() for s in self._services())

    # -- workers ----------------------------------------------------------------------------

    def register_worker(self, target: WorkerTarget) -> Path:
        """Have Prometheus scrape this worker's /metrics (picked up within seconds, no reload)."""
        return worker_targets.register(self.workers_dir, target)

    def unregister_worker(self, name: str) -> bool:
        """Stop scraping a worker that is stopped on purpose (so BillingWorkerDown does not fire)."""
        return worker_targets.unregister(self.workers_dir, name)

    def discover_workers(self, nodes: list[ScrapeNode] | None = None) -> list[WorkerTarget]:
        """Register the running billing-workers with --metrics-port that use these nodes (default: the running ones)."""
        if nodes is None:
            nodes = [n for name in self.running_topologies() for n in topology_nodes(self.topology(name))]
        found = worker_targets.discover({n.port for n in nodes})
        for target in found:
            self.register_worker(target)
        return found

    # -- status -----------------------------------------------------------------------------

    def targets(self) -> list[Target]:
        return self.api.targets()

    def wait_targets_up(
        self, timeout_s: float = 20.0, *, jobs: tuple[str, ...] = ("redis", "redis-sentinel")
    ) -> list[Target]:
        """Poll ``/api/v1/targets`` until the exporters of every running node are targets, scraped and up.

        After a reload (SIGHUP) the old target list answers for a moment: the expected nodes decide.
        """
        running = [self.topology(name) for name in self.running_topologies()]
        expected = {f"127.0.0.1:{n.port}" for topo in running for n in topology_nodes(topo)}

        def up(targets: list[Target]) -> bool:
            return {t.labels.get("node") for t in targets} >= expected and all(t.health == "up" for t in targets)

        targets = poll_value(lambda: [t for t in self.targets() if t.job in jobs], up, timeout_s, 0.5)
        if not up(targets):
            bad = [f"{t.labels.get('node', t.url)} {t.health} {t.last_error}" for t in targets if t.health != "up"]
            raise LauncherError(f"targets not up after {timeout_s:g} s: {'; '.join(bad) or 'no targets'}")
        return targets

    def problems(self) -> list[str]:
        """One line per process that should run and does not (exporters of running topologies, Prometheus)."""
        lines = []
        for name in self.running_topologies():
            for node in topology_nodes(self.topology(name)):
                exporter = self.exporter(node)
                if exporter.pid() is None:
                    lines.append(exporter.exit_reason())
        prom = self.prometheus()
        if prom.pid() is None:
            lines.append(prom.exit_reason())
        return lines
