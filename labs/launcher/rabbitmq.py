"""The ``rabbitmq`` topology: a 3-node RabbitMQ cluster on 127.0.0.1 with a quorum queue of 3 replicas.

Each node is a plain process of Debian's ``rabbitmq-server`` (3.10) with its own
``RABBITMQ_NODENAME`` (``rabbit-<port>@localhost``), AMQP port, distribution port (AMQP + 20000),
config file (classic peer discovery: the nodes form one cluster as they start), Mnesia and log
directories, an empty enabled-plugins file and ``HOME`` (its Erlang cookie). One ``epmd`` of our own
on ``LAB_EPMD_PORT`` (not the system's 4369) names the nodes; the launcher starts it first and stops
it last, so ``make down`` leaves no Erlang process behind.

Ready means every node runs the rabbit app, ``cluster_status`` lists the three, and the queue
``orders`` (quorum, :func:`queue_arguments`) has three online members.

Version: 3.10.8, the newest Debian 12 ships; the 3.10 series is past the end of its community support.
What 4.x changes for quorum queues (release notes 4.0-4.3): a default delivery limit of 20 (3.10 has
none; here ``x-delivery-limit`` is always set), message priorities, checkpoints for a faster
recovery on start, classic-queue mirroring removed (quorum queues and streams are the replicated
types), Khepri instead of Mnesia and, in 4.3, no ``cluster_partition_handling`` at all.

Every listener is on 127.0.0.1, the Erlang distribution too (:data:`DIST_LOOPBACK`).
:meth:`RabbitCluster.in_namespaces` puts each node in a network namespace of its own (partitions):
then each node has its own epmd there, listens on its namespace's address (AMQP, distribution,
epmd), is named ``rabbit-<port>@rabbit-<port>`` and finds its peers' addresses through an Erlang
``inetrc`` file (``ERL_INETRC``: ``{host, IP, [name]}`` lines), and ``rabbitmqctl`` runs inside
the node's namespace. ``guest`` may log in from those private addresses (``loopback_users = none``).

The timers a partition meets: the Erlang distribution's ``net_ticktime`` (60 s by default; a peer
silent for 45-75 s is down), and Ra's failure detector (``aten``, polling every second) that makes
a quorum queue's followers elect a new leader once the old one is unreachable.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

from labs import polling
from labs.launcher import netns, ports
from labs.launcher.broker_process import BrokerProcess, rss_bytes
from labs.launcher.errors import LauncherError

if TYPE_CHECKING:  # aio-pika is imported where it is used
    from aio_pika.abc import AbstractChannel, AbstractQueue
    from pamqp.common import FieldTable

T = TypeVar("T")
PORTS_VAR = "LAB_RABBITMQ_PORTS"
EPMD_PORT_VAR = "LAB_EPMD_PORT"
DEFAULT_PORTS = (5680, 5681, 5682)
DEFAULT_EPMD_PORT = 4370
DIST_OFFSET = 20000
SBIN = Path("/usr/lib/rabbitmq/bin")
QUEUE = "orders"
DELIVERY_LIMIT = 5
NODE_START_TIMEOUT_S = 90.0
CTL_TIMEOUT_S = 60.0
# Erlang distribution (node to node, and rabbitmqctl to a node) on 127.0.0.1 only: kernel's
# ``inet_dist_use_interface``, which RabbitMQ 3.10 also reports as its clustering listener.
DIST_LOOPBACK = "-kernel inet_dist_use_interface {127,0,0,1}"


def queue_arguments(delivery_limit: int = DELIVERY_LIMIT, dlx: str = "dlx") -> FieldTable:
    """A quorum queue that dead-letters (at least once, 3.10+) after ``delivery_limit`` deliveries.

    ``x-dead-letter-strategy: at-least-once`` requires ``x-overflow: reject-publish``: a full
    queue refuses a publish (the producer sees ``refused``) instead of dropping its head.
    """
    return {
        "x-queue-type": "quorum",
        "x-delivery-limit": delivery_limit,
        "x-dead-letter-exchange": dlx,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }


def binary(name: str) -> str:
    """``rabbitmq-server`` or ``rabbitmqctl``: Debian's copy under /usr/lib/rabbitmq/bin, else PATH."""
    path = SBIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise LauncherError(
            f"{name} not found (in {SBIN} or on PATH): run 'make brokers-bin' "
            "(apt-get install --no-install-recommends rabbitmq-server nats-server)"
        )
    return found


class QueueInfo(TypedDict, total=False):
    """A row of ``rabbitmqctl list_queues name type leader members online messages --formatter json``."""

    name: str
    type: str
    leader: str
    members: list[str]
    online: list[str]
    messages: int


@dataclass
class RabbitCluster:
    """Three RabbitMQ nodes and their epmd under ``home`` (``.run/rabbitmq`` by default)."""

    home: Path
    amqp_ports: tuple[int, ...] = DEFAULT_PORTS
    epmd_port: int = DEFAULT_EPMD_PORT
    cookie: str = ""
    dist_ports: tuple[int, ...] = ()  # Erlang distribution; default: each AMQP port + 20000
    nodes: list[BrokerProcess] = field(default_factory=list)
    name: str = "rabbitmq"
    owner_pid: int | None = None  # set: every process stops when that one exits (labs.launcher.reaper)
    fabric: netns.Fabric | None = None  # in_namespaces(): each node (and an epmd) in a namespace of its own
    # kernel net_ticktime: a peer silent for 0.75-1.25 x this is down (None: Erlang's 60 s). Set it on
    # every node and the CLI alike (advanced.config; RabbitMQ's docs advise against values below ~10 s)
    net_ticktime_s: int | None = None

    def __post_init__(self) -> None:
        self.home = self.home.resolve()
        self.cookie = self.cookie or self._cookie()
        self.dist_ports = self.dist_ports or tuple(p + DIST_OFFSET for p in self.amqp_ports)
        self._dist = dict(zip(self.amqp_ports, self.dist_ports, strict=True))
        self.nodes = [BrokerProcess(f"rabbit-{p}", p, self.home, b"rabbit", self._env(p), "rabbitmq", self.owner_pid)
                      for p in self.amqp_ports]

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_env(cls, run_dir: Path) -> RabbitCluster:
        amqp = tuple(_ports_from_env(PORTS_VAR, DEFAULT_PORTS))
        (epmd,) = _ports_from_env(EPMD_PORT_VAR, (DEFAULT_EPMD_PORT,))[:1]
        return cls(run_dir / "rabbitmq", amqp, epmd)

    @classmethod
    def on_free_ports(cls, run_dir: Path, *, owner_pid: int | None = -1) -> RabbitCluster:
        """AMQP, distribution and epmd ports all below the ephemeral range (tests, make compare, notebooks).

        Its processes stop when ``owner_pid`` exits (default -1: the calling process; None: never).
        """
        picked = ports.free_ports(7, ports.session_port_window())
        owner = os.getpid() if owner_pid == -1 else owner_pid
        return cls(Path(run_dir) / "rabbitmq", tuple(picked[:3]), picked[6], dist_ports=tuple(picked[3:6]),
                   owner_pid=owner)

    def _cookie(self) -> str:
        path = self.home / ".erlang.cookie"
        if path.exists():
            return path.read_text().strip()
        return secrets.token_hex(16).upper()

    def in_namespaces(self) -> RabbitCluster:
        """The same cluster with each node (and an epmd of its own) in a network namespace of its own.

        Planned here, created by :meth:`ensure`; ``fabric.partition`` then cuts nodes apart. Clients
        reach the nodes from inside a namespace (:meth:`client_call`: the hub reaches every member).
        """
        netns.require()
        names = [f"rabbit-{p}" for p in self.amqp_ports]
        fabric = netns.Fabric.plan(self.home, names)
        self.fabric = fabric
        self.nodes = [replace(n, netns=fabric.member(n.name).ns, extra_env=self._env(n.port)) for n in self.nodes]
        return self

    def host(self, port: int) -> str:
        """The address ``port``'s node listens on: 127.0.0.1, or its namespace's address."""
        return "127.0.0.1" if self.fabric is None else self.fabric.ip(f"rabbit-{port}")

    def node_name(self, port: int) -> str:
        return f"rabbit-{port}@localhost" if self.fabric is None else f"rabbit-{port}@rabbit-{port}"

    def client_call(self, fn: Callable[[], T]) -> T:
        """``fn()`` where the nodes are reachable: here, or in the fabric's hub namespace."""
        return fn() if self.fabric is None else netns.call_in(self.fabric.hub_ns, fn)

    def _accepts(self, port: int) -> bool:
        if self.fabric is None:
            return ports.in_use(port)
        return netns.accepts(self.fabric.hub_ns, self.host(port), port)

    def _dist_interface(self, port: int) -> str:
        return "-kernel inet_dist_use_interface {" + self.host(port).replace(".", ",") + "}"

    def _env(self, port: int) -> dict[str, str]:
        node_home = self.home / f"rabbit-{port}-data"
        dist = self._dist_interface(port)
        ns_only = {} if self.fabric is None else {"ERL_INETRC": str(self.home / "inetrc")}
        return {
            **ns_only,
            "HOME": str(self.home),  # .erlang.cookie lives here, shared by the nodes and rabbitmqctl
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": self.host(port),
            "RABBITMQ_NODENAME": self.node_name(port),
            "RABBITMQ_NODE_IP_ADDRESS": self.host(port),
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(self._dist[port]),
            "RABBITMQ_CONFIG_FILE": str(self.home / f"rabbit-{port}.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.home / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.home / "rabbitmq-env.conf"),
            "RABBITMQ_MNESIA_BASE": str(node_home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(node_home / "log"),
            "RABBITMQ_LOGS": "-",  # to stdout: the launcher's log file
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.home / "enabled_plugins"),
            # one scheduler per node: three nodes share two cores with everything else; the
            # distribution listener on loopback (Erlang's default is every interface)
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": f"+S 1:1 +sbwt none +sbwtdcpu none +sbwtdio none {dist}",
            # rabbitmqctl is a distributed Erlang node too (ports 35672-35682 while it runs)
            "RABBITMQ_CTL_ERL_ARGS": dist + ("" if self.net_ticktime_s is None
                                             else f" -kernel net_ticktime {self.net_ticktime_s}"),
        }

    def _write_files(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(self.cookie)
            cookie.chmod(0o400)
        (self.home / "enabled_plugins").write_text("[].\n")
        (self.home / "rabbitmq-env.conf").write_text("")
        ticktime = "" if self.net_ticktime_s is None else f"{{kernel, [{{net_ticktime, {self.net_ticktime_s}}}]}}"
        (self.home / "advanced.config").write_text(f"[{ticktime}].\n")
        peers = "\n".join(
            f"cluster_formation.classic_config.nodes.{i} = {self.node_name(p)}"
            for i, p in enumerate(self.amqp_ports, 1)
        )
        if self.fabric is not None:  # each node's name -> its namespace's address, for Erlang's resolver
            hosts = "".join("{host, {" + self.host(p).replace(".", ",") + "}, [\"rabbit-" + str(p) + "\"]}.\n"
                            for p in self.amqp_ports)
            (self.home / "inetrc").write_text(hosts + "{lookup, [file, native]}.\n")
        guest = "" if self.fabric is None else "loopback_users = none\n"  # private addresses of the run
        for port in self.amqp_ports:
            (self.home / f"rabbit-{port}.conf").write_text(
                f"listeners.tcp.1 = {self.host(port)}:{port}\n{guest}"
                "cluster_formation.peer_discovery_backend = classic_config\n"
                f"{peers}\n"
                "disk_free_limit.absolute = 50MB\n"
                "vm_memory_high_watermark.absolute = 1GB\n"
                "log.console = true\nlog.console.level = warning\nlog.file = false\n"
            )

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def epmd(self) -> BrokerProcess:
        return BrokerProcess("epmd", self.epmd_port, self.home, b"epmd", {"ERL_EPMD_ADDRESS": "127.0.0.1"},
                             "rabbitmq", self.owner_pid)

    @property
    def epmds(self) -> list[BrokerProcess]:
        """The one epmd on loopback; in namespaces one per node, on its address (and its loopback)."""
        if self.fabric is None:
            return [self.epmd]
        return [BrokerProcess(f"epmd-{n.port}", self.epmd_port, self.home, b"epmd",
                              {"ERL_EPMD_ADDRESS": f"127.0.0.1,{self.host(n.port)}"}, "rabbitmq", self.owner_pid,
                              n.netns) for n in self.nodes]

    @property
    def processes(self) -> list[BrokerProcess]:
        return [*self.epmds, *self.nodes]

    def ensure(self, queue: str = QUEUE, timeout_s: float = NODE_START_TIMEOUT_S) -> list[str]:
        """Start what is not running, wait until the cluster has 3 nodes and ``queue`` 3 online members."""
        server = binary("rabbitmq-server")
        if self.fabric is not None:
            self.fabric.up()
        self._write_files()
        epmd_bin = shutil.which("epmd") or "epmd"
        for epmd, node in zip(self.epmds, self.nodes, strict=False):
            if epmd.pid() is None:
                epmd.start([epmd_bin, "-port", str(self.epmd_port)], EPMD_PORT_VAR,
                           functools.partial(self._epmd_up, node.port), "a TCP connect", 10.0)
        # The first node alone, then the others side by side: they find it (classic peer discovery)
        # and join it; started all at once, two fresh nodes could each form a cluster of their own.
        missing = [node for node in self.nodes if node.pid() is None]
        if missing:
            self._start_node(server, missing[0], timeout_s)
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(lambda n: self._start_node(server, n, timeout_s), missing[1:]))
        self.wait_cluster(timeout_s)
        url = self.urls()[0]
        self.client_call(lambda: declare_queue(url, queue))
        self.wait_queue(queue, timeout_s)
        return self.urls()

    def _epmd_up(self, node_port: int) -> bool:
        if self.fabric is None:
            return ports.in_use(self.epmd_port)
        return netns.accepts(self.fabric.hub_ns, self.host(node_port), self.epmd_port)

    def _start_node(self, server: str, node: BrokerProcess, timeout_s: float) -> int:
        return node.start([server], PORTS_VAR, lambda: self._accepts(node.port), "AMQP connections", timeout_s)

    def urls(self) -> list[str]:
        return [f"amqp://guest:guest@{self.host(p)}:{p}/" for p in self.amqp_ports]

    def stop(self) -> list[int]:
        """Stop the nodes (SIGTERM, then SIGKILL), then epmd, then the namespaces if any; the pids stopped."""
        stopped = [pid for node in self.nodes if (pid := node.kill(signal.SIGTERM, 20.0)) is not None]
        stopped += [pid for epmd in self.epmds if (pid := epmd.kill(signal.SIGTERM)) is not None]
        if self.fabric is not None:
            self.fabric.destroy()
        return stopped

    def kill_node(self, port: int) -> int | None:
        """kill -9 of one node (the whole process group)."""
        return self._node(port).kill(signal.SIGKILL)

    def restart_node(self, port: int, timeout_s: float = NODE_START_TIMEOUT_S) -> None:
        self._start_node(binary("rabbitmq-server"), self._node(port), timeout_s)

    def _node(self, port: int) -> BrokerProcess:
        for node in self.nodes:
            if node.port == port:
                return node
        raise LauncherError(f"port {port} is not a node of the rabbitmq topology")

    # -- rabbitmqctl ----------------------------------------------------------------------

    def ctl(self, *args: str, port: int | None = None, timeout_s: float = CTL_TIMEOUT_S) -> str:
        """``rabbitmqctl -n <node> args...`` with the cluster's cookie and epmd; its stdout."""
        target = port if port is not None else next((n.port for n in self.nodes if n.pid()), self.amqp_ports[0])
        env = {**os.environ, **self._env(target)}
        cmd = [binary("rabbitmqctl"), "-n", self.node_name(target), *args]
        if self.fabric is not None:  # the CLI is an Erlang node: it must reach the node's namespace
            cmd = self.fabric.exec_argv(f"rabbit-{target}", cmd)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise LauncherError(f"rabbitmqctl {' '.join(args)} did not answer in {timeout_s:.0f} s") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            hint = " (does the cookie match? " + str(self.home / ".erlang.cookie") + ")" \
                if any("cookie" in line.lower() for line in detail) else ""
            raise LauncherError(f"rabbitmqctl {' '.join(args)} failed: {' | '.join(detail[-3:])}{hint}")
        return done.stdout

    def running_nodes(self) -> list[str]:
        data = json.loads(self.ctl("cluster_status", "--formatter", "json"))
        return [str(n) for n in data.get("running_nodes", [])]

    def queue_info(self, queue: str = QUEUE) -> QueueInfo | None:
        """``name, leader, members, online`` of ``queue`` (None when it does not exist)."""
        out = self.ctl("list_queues", "name", "type", "leader", "members", "online", "messages", "--formatter", "json")
        for row in json.loads(out or "[]"):
            if row.get("name") == queue:
                info: QueueInfo = row  # a fresh object of the JSON just parsed
                return info
        return None

    def leader_port(self, queue: str = QUEUE) -> int:
        info = self.queue_info(queue)
        if info is None or not info.get("leader"):
            raise LauncherError(f"the quorum queue {queue!r} has no leader")
        leader = str(info["leader"])
        for port in self.amqp_ports:
            if self.node_name(port) == leader:
                return port
        raise LauncherError(f"the leader {leader} of {queue!r} is not one of this cluster's nodes")

    def wait_cluster(self, timeout_s: float) -> None:
        """Poll ``cluster_status`` until every node runs; a :class:`LauncherError` naming the last state."""
        seen = ["not checked"]

        def formed() -> bool:
            try:
                running = self.running_nodes()
            except LauncherError as exc:
                seen[0] = str(exc)
                return False
            seen[0] = f"running nodes {running}"
            return len(running) == len(self.nodes)

        polling.wait_until(formed, timeout_s, lambda: f"the RabbitMQ cluster to form ({seen[0]})", poll_s=0.5,
                           error=LauncherError)

    def wait_queue(self, queue: str, timeout_s: float) -> QueueInfo:
        """Poll ``list_queues`` until ``queue`` has a leader and every node online as a member; its row."""
        seen: list[QueueInfo | None] = [None]

        def ready() -> QueueInfo | None:
            info = seen[0] = self.queue_info(queue)
            if info and len(info.get("online") or []) == len(self.nodes) and info.get("leader"):
                return info
            return None

        return polling.wait_until(ready, timeout_s, lambda: f"the quorum queue {queue!r} to have "
                                  f"{len(self.nodes)} online members (last: {seen[0]})", poll_s=0.5,
                                  error=LauncherError)

    def rss_total_bytes(self) -> int:
        return sum(rss_bytes(n.pid()) for n in self.nodes)


def declare_queue(url: str, queue: str, delivery_limit: int = DELIVERY_LIMIT) -> None:
    """Declare ``queue`` (quorum, dead letters to ``<queue>.dlq`` through the ``dlx`` exchange)."""
    asyncio.run(_declare(url, queue, delivery_limit))


async def _declare(url: str, queue: str, delivery_limit: int) -> None:
    import aio_pika  # local: only the rabbitmq topology needs it

    connection = await aio_pika.connect(url, timeout=30)
    async with connection:
        channel = await connection.channel()
        await declare_on(channel, queue, delivery_limit)


async def declare_on(channel: AbstractChannel, queue: str, delivery_limit: int = DELIVERY_LIMIT) -> AbstractQueue:
    """Declare the dead-letter exchange, ``<queue>.dlq`` (quorum) bound to it, and ``queue``; the queue."""
    import aio_pika

    dlx = await channel.declare_exchange("dlx", aio_pika.ExchangeType.DIRECT, durable=True)
    dlq = await channel.declare_queue(f"{queue}.dlq", durable=True, arguments={"x-queue-type": "quorum"})
    await dlq.bind(dlx, routing_key=queue)
    return await channel.declare_queue(queue, durable=True, arguments=queue_arguments(delivery_limit))


def _ports_from_env(var: str, default: tuple[int, ...]) -> list[int]:
    raw = os.environ.get(var)
    if not raw:
        return list(default)
    try:
        return [int(p) for p in raw.split(",") if p.strip()]
    except ValueError:
        raise LauncherError(f"{var}={raw!r} is not a port number (or a comma-separated list)") from None

