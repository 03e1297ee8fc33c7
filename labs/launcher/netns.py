"""Real network partitions: every member (a Redis node, a sentinel, a client) in a network namespace of its own.

The layout of one *fabric* (one run): a hub namespace holds a bridge with :data:`HUB_IP`; each
member gets a namespace with one veth (``eth0``, an address in :data:`NETWORK`) whose other end
is a port of the hub's bridge. Nothing is added to the root namespace: no address, no route, no
rule, so the traffic of a run stays between namespaces it created. ``partition(a, b)`` adds to
each member of ``a`` and ``b`` an nftables table that drops every packet from the other side
(silently: the peer sees no RST and no ICMP, only silence); ``heal()`` deletes those tables.

Processes start in their namespace with ``ip netns exec``; Python code reaches a member from
inside one: :func:`run_thread` (a thread living in a namespace), :class:`NetnsConnection` (a
redis-py connection whose socket is created there). ``tc netem`` is not used: many kernels (this
course's CI among them) ship without it, while nftables works in any namespace.

Names: ``rbwb-<run id>-<member>``, the run id being the creating pid and four hex digits, so
parallel runs never clash. Every fabric is registered under ``<repository>/.run/netns/`` before
anything is created and unregistered when it is destroyed: ``make down`` removes what a crashed
run of this checkout left (:func:`remove_registered`), ``make status`` lists it (:func:`leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import redis

from labs.launcher.errors import LauncherError

log = logging.getLogger(__name__)
T = TypeVar("T")

NETWORK = "10.213.0.0/24"  # the only addresses a fabric uses, all inside its own namespaces
_NET_PREFIX = "10.213.0."
HUB_IP = _NET_PREFIX + "254"
PREFIX = "rbwb"  # "redis broker workbook": every namespace of the workbook starts with it
TABLE = "rbwb_partition"  # the nftables table partition() adds and heal() deletes
HUB = "hub"
STATE_FILE = "netns.json"
MAX_MEMBERS = 250
_CLONE_NEWNET = 0x40000000
CMD_TIMEOUT_S = 15.0


REGISTRY_VAR = "LAB_NETNS_REGISTRY"


def registry_dir() -> Path:
    """``<repository>/.run/netns/``: one file per live fabric of this checkout (whatever ``$LAB_RUN_DIR`` says).

    ``$LAB_NETNS_REGISTRY`` moves it (a test of the crash cleanup keeps its own).
    """
    env = os.environ.get(REGISTRY_VAR)
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".run" / "netns"


@functools.cache
def unavailable_reason() -> str | None:
    """Why partitions cannot run here (one line), or None when they can; probed once per process.

    Every skip of a partition test goes through this one function.
    """
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces and nftables need root (run as root, e.g. in the course VM or a CI container)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install {package}; 'make setup' does it as root)"
    probe = f"{PREFIX}-probe{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe])
        try:
            _run(["ip", "netns", "exec", probe, "nft", f"add table inet {TABLE}"])
        finally:
            _run(["ip", "netns", "del", probe])
    except LauncherError as exc:
        return f"network namespaces or nftables do not work here: {exc}"
    return None


def require() -> None:
    """Raise one :class:`LauncherError` line when partitions cannot run here."""
    if (reason := unavailable_reason()) is not None:
        raise LauncherError(f"--netns: {reason}")


def _run(argv: list[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError(f"{' '.join(argv[:4])}: {exc}") from None
    if done.returncode != 0:
        raise LauncherError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


# -- entering a namespace from Python ------------------------------------------------------


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(ns: str) -> Iterator[None]:
    """Move the calling thread into namespace ``ns`` and back: sockets created inside stay in ``ns``."""
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(here)
    finally:
        os.close(here)


def run_thread(ns: str, target: Callable[[], None], name: str) -> threading.Thread:
    """Start a daemon thread that runs ``target`` inside ``ns`` (every socket it opens is a client there)."""

    def body() -> None:
        with entered(ns):
            target()

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


def call_in(ns: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a thread living in ``ns`` (its sockets, an ``asyncio.run`` loop's too, are clients there);
    its result, or its exception raised here."""

    def body() -> T:
        with entered(ns):
            return fn()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"in-{ns}") as pool:
        return pool.submit(body).result()


def accepts(ns: str, host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` as seen from inside ``ns``."""
    from labs.launcher import ports  # local: ports is a leaf the launcher's start-up imports first

    return call_in(ns, lambda: ports.in_use(port, host))


class NetnsConnection(redis.Connection):
    """A redis-py connection whose socket is created inside network namespace ``netns``."""

    def __init__(self, *, netns: str, **kwargs: Any) -> None:
        self.netns = netns
        cast("Callable[..., None]", super().__init__)(**kwargs)  # redis-py's Connection is unannotated

    def _connect(self) -> socket.socket:
        with entered(self.netns):
            return cast("Callable[[], socket.socket]", super()._connect)()


def client(ns: str, host: str, port: int, *, timeout_s: float = 1.0, **kwargs: Any) -> redis.Redis:
    """A client of ``host:port`` as seen from inside ``ns``; the caller closes it."""
    pool = redis.ConnectionPool(
        connection_class=NetnsConnection,
        netns=ns,
        host=host,
        port=port,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        **kwargs,
    )
    return redis.Redis(connection_pool=pool)


# -- the fabric ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One namespace of a fabric: a name (``redis-7001``, ``client-a``), its namespace and address."""

    name: str
    ns: str
    ip: str


@dataclass
class Fabric:
    """The namespaces of one run, planned in ``home/netns.json`` and created by :meth:`up`."""

    home: Path
    run_id: str
    members: dict[str, Member] = field(default_factory=dict)
    cut: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    @classmethod
    def plan(cls, home: Path, names: Iterable[str]) -> Fabric:
        """The fabric saved under ``home``, else a new one (nothing is created until :meth:`up`)."""
        fabric = cls.load(home) or cls(Path(home), f"{os.getpid()}x{secrets.token_hex(2)}")
        for name in names:
            fabric._assign(name)
        return fabric

    @classmethod
    def load(cls, home: Path) -> Fabric | None:
        path = Path(home) / STATE_FILE
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            members = {m["name"]: Member(**m) for m in data["members"]}
            cut = data.get("cut")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LauncherError(f"{path} is unreadable ({exc}); remove it after 'ip netns list'") from None
        return cls(Path(home), str(data["run_id"]), members, (tuple(cut[0]), tuple(cut[1])) if cut else None)

    def ns_name(self, member: str) -> str:
        return f"{PREFIX}-{self.run_id}-{member}"

    @property
    def hub_ns(self) -> str:
        return self.ns_name(HUB)

    def _assign(self, name: str) -> Member:
        if name in self.members:
            return self.members[name]
        if len(self.members) >= MAX_MEMBERS:
            raise LauncherError(f"a fabric holds at most {MAX_MEMBERS} members")
        used = {m.ip for m in self.members.values()}
        ip = next(f"{_NET_PREFIX}{i}" for i in range(1, MAX_MEMBERS + 1) if f"{_NET_PREFIX}{i}" not in used)
        member = Member(name, self.ns_name(name), ip)
        self.members[name] = member
        return member

    def ip(self, name: str) -> str:
        return self.member(name).ip

    def member(self, name: str) -> Member:
        try:
            return self.members[name]
        except KeyError:
            known = sorted(self.members)
            raise LauncherError(f"no member {name!r} in fabric {self.run_id}; members: {known}") from None

    def save(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        cut = [list(self.cut[0]), list(self.cut[1])] if self.cut else None
        state = {"run_id": self.run_id, "members": [asdict(m) for m in self.members.values()], "cut": cut}
        (self.home / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")
        registry_dir().mkdir(parents=True, exist_ok=True)
        (registry_dir() / f"{self.run_id}.json").write_text(json.dumps({"home": str(self.home.resolve())}) + "\n")

    # -- lifecycle ----------------------------------------------------------------------

    def up(self) -> None:
        """Create the hub and every planned member that does not exist yet (registered first)."""
        self.save()
        existing = set(list_namespaces())
        if self.hub_ns not in existing:
            _run(["ip", "netns", "add", self.hub_ns])
            for cmd in (["link", "set", "lo", "up"], ["link", "add", "br0", "type", "bridge"],
                        ["addr", "add", f"{HUB_IP}/24", "dev", "br0"], ["link", "set", "br0", "up"]):
                _run(["ip", "-n", self.hub_ns, *cmd])
        for member in self.members.values():
            if member.ns not in existing:
                self._create(member)
        log.info("fabric %s: %d namespaces in %s", self.run_id, len(self.members) + 1, NETWORK)

    def add(self, name: str) -> Member:
        """Plan and create one more member (a client) in a fabric that is up."""
        member = self._assign(name)
        self.save()
        if member.ns not in list_namespaces():
            self._create(member)
        return member

    def _create(self, member: Member) -> None:
        index = member.ip.rsplit(".", 1)[1]
        hub_end = f"v{index}"
        _run(["ip", "netns", "add", member.ns])
        _run(["ip", "-n", self.hub_ns, "link", "add", hub_end, "type", "veth", "peer", "name", "eth0",
              "netns", member.ns])
        _run(["ip", "-n", self.hub_ns, "link", "set", hub_end, "master", "br0", "up"])
        for cmd in (["link", "set", "lo", "up"], ["addr", "add", f"{member.ip}/24", "dev", "eth0"],
                    ["link", "set", "eth0", "up"]):
            _run(["ip", "-n", member.ns, *cmd])

    def exec_argv(self, member: str | None, argv: Iterable[str]) -> list[str]:
        """``argv`` run inside the member's namespace (``None``: the hub, which reaches every member)."""
        ns = self.hub_ns if member is None else self.member(member).ns
        return ["ip", "netns", "exec", ns, *argv]

    def destroy(self) -> list[str]:
        """Kill whatever still runs in the fabric's namespaces, delete them, unregister; the names removed."""
        removed = remove_namespaces([*(m.ns for m in self.members.values()), self.hub_ns])
        (self.home / STATE_FILE).unlink(missing_ok=True)
        (registry_dir() / f"{self.run_id}.json").unlink(missing_ok=True)
        return removed

    # -- partitions ---------------------------------------------------------------------

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Drop every packet between the members of ``side_a`` and those of ``side_b`` (both ways, silently).

        Members on neither side (and the hub) keep talking to everyone. A second call replaces the first.
        """
        a, b = tuple(side_a), tuple(side_b)
        if overlap := set(a) & set(b):
            raise LauncherError(f"a member cannot be on both sides of a partition: {sorted(overlap)}")
        self.heal()
        self.cut = (a, b)
        self.save()
        # Each member drops what comes from the other side *and* what it would send there, so a link
        # is cut as soon as either end has its rules: the first member cut (a master, listed first)
        # loses every peer at once, never its replica's link before a client's.
        for mine, theirs in ((a, b), (b, a)):
            peers = ", ".join(self.ip(name) for name in theirs)
            rules = (
                f"add table inet {TABLE}\n"
                f"add chain inet {TABLE} input {{ type filter hook input priority -10; policy accept; }}\n"
                f"add chain inet {TABLE} output {{ type filter hook output priority -10; policy accept; }}\n"
                f"add rule inet {TABLE} input ip saddr {{ {peers} }} drop\n"
                f"add rule inet {TABLE} output ip daddr {{ {peers} }} drop\n"
            )
            for name in mine:
                _run(["ip", "netns", "exec", self.member(name).ns, "nft", "-f", "-"], stdin=rules)
        log.info("fabric %s: partition %s | %s", self.run_id, a, b)

    def heal(self) -> None:
        """Delete the partition's table in every member that has one."""
        if self.cut is None:
            return
        for name in {*self.cut[0], *self.cut[1]}:
            ns = self.member(name).ns
            _run(["ip", "netns", "exec", ns, "nft", f"add table inet {TABLE}; delete table inet {TABLE}"])
        self.cut = None
        self.save()
        log.info("fabric %s: healed", self.run_id)

    def rules(self, name: str) -> str:
        """``nft list ruleset`` inside one member (empty once healed)."""
        return _run(["ip", "netns", "exec", self.member(name).ns, "nft", "list", "ruleset"]).strip()


# -- what is left over ----------------------------------------------------------------------


def list_namespaces() -> list[str]:
    """Every network namespace of the workbook on this machine (any run, any checkout)."""
    if shutil.which("ip") is None:
        return []
    try:
        out = _run(["ip", "netns", "list"])
    except LauncherError:
        return []
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [name for name in names if name.startswith(f"{PREFIX}-")]


def namespace_pids(ns: str) -> list[int]:
    try:
        return [int(p) for p in _run(["ip", "netns", "pids", ns]).split()]
    except LauncherError:
        return []


def remove_namespaces(names: Iterable[str]) -> list[str]:
    """SIGKILL every process in each namespace, then delete it (a namespace with a process would linger unnamed)."""
    existing = set(list_namespaces())
    removed = []
    for ns in names:
        if ns not in existing:
            continue
        for pid in namespace_pids(ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _run(["ip", "netns", "del", ns])
        removed.append(ns)
    return removed


def _registered() -> dict[str, Path]:
    found = {}
    for path in sorted(registry_dir().glob("*.json")) if registry_dir().exists() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            found[path.stem] = Path(json.loads(path.read_text())["home"])
    return found


def leftovers() -> dict[str, list[str]]:
    """The workbook's namespaces, by run id: those of this checkout's fabrics (registered) and any other."""
    by_run: dict[str, list[str]] = {}
    for ns in list_namespaces():
        run_id = ns.split("-")[1] if ns.count("-") >= 2 else ns
        by_run.setdefault(run_id, []).append(ns)
    return by_run


def remove_registered() -> list[str]:
    """Destroy every fabric this checkout registered (after a crash too); the namespaces removed.

    Namespaces of other checkouts and sessions are not touched, except empty ones whose creating
    process is gone (nothing can use those).
    """
    removed: list[str] = []
    registered = _registered()
    for run_id, ns_list in leftovers().items():
        if run_id in registered or _orphan(run_id, ns_list):
            removed += remove_namespaces(ns_list)
    for run_id, home in registered.items():
        (home / STATE_FILE).unlink(missing_ok=True)
        (registry_dir() / f"{run_id}.json").unlink(missing_ok=True)
    return removed


def _orphan(run_id: str, ns_list: list[str]) -> bool:
    head = run_id.split("x", 1)[0]
    if not head.isdigit() or any(namespace_pids(ns) for ns in ns_list):
        return False
    try:
        os.kill(int(head), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
