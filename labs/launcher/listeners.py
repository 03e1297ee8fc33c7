"""Which TCP ports a launched process (and every process of its group) listens on, and on which address.

Read from ``/proc``: a process's sockets are the ``socket:[inode]`` links under ``/proc/<pid>/fd``,
and its network namespace's listening sockets are the rows of ``/proc/<pid>/net/tcp`` and ``tcp6``
in state ``0A`` (LISTEN). Reading the table through the pid (not ``/proc/net/tcp``) finds a server
that runs in a network namespace of its own (``--netns``) too.

The workbook's rule: every endpoint binds 127.0.0.1 (:func:`beyond_loopback`); a process in a
namespace of a partition fabric may also bind its own address there, which only that run's
namespaces can reach (:data:`labs.launcher.netns.NETWORK`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from labs.launcher import netns

LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket: the process holding it, its network namespace, address and port."""

    pid: int
    command: str
    net_ns: str  # ``net:[4026531840]``: the namespace the socket lives in
    address: str
    port: int

    def __str__(self) -> str:
        return f"{self.command} (pid {self.pid}) on {self.address}:{self.port}"


def _hex_address(raw: str) -> str:
    """``0100007F`` (little-endian words, as /proc/net/tcp writes them) as ``127.0.0.1``; IPv6 too."""
    packed = bytes.fromhex(raw)
    words = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
    return str(ipaddress.ip_address(words))


def _listening(pid: int) -> dict[str, tuple[str, int]]:
    """Inode -> (address, port) of every LISTEN socket in ``pid``'s network namespace."""
    found: dict[str, tuple[str, int]] = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == LISTEN:
                    host, port = fields[1].split(":")
                    found[fields[9]] = (_hex_address(host), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def group_members(leader: int) -> list[int]:
    """``leader`` and every process whose process group is ``leader`` (a RabbitMQ node's ``beam.smp``,
    ``erl_child_setup``; the launcher starts each broker in a session of its own)."""
    members = [leader]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(stat.parent.name)
            if pid != leader and int(stat.read_text().rsplit(")", 1)[1].split()[2]) == leader:
                members.append(pid)
    return members


def listeners(pids: Iterable[int]) -> list[Listener]:
    """Every TCP socket in LISTEN state held by ``pids`` or a member of their process groups."""
    found: list[Listener] = []
    for leader in pids:
        for pid in group_members(leader):
            table = _listening(pid)
            with contextlib.suppress(OSError):
                command = Path(f"/proc/{pid}/comm").read_text().strip()
                net_ns = os.readlink(f"/proc/{pid}/ns/net")
                for inode in _socket_inodes(pid) & set(table):
                    address, port = table[inode]
                    found.append(Listener(pid, command, net_ns, address, port))
    return found


def _own_net_ns() -> str:
    return os.readlink("/proc/self/ns/net")


def allowed(listener: Listener, host_ns: str | None = None) -> bool:
    """Loopback anywhere; in a namespace other than the host's, also an address of the fabric's network."""
    ip = ipaddress.ip_address(listener.address)
    if ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback):
        return True
    if listener.net_ns == (host_ns or _own_net_ns()):
        return False
    return ip in ipaddress.ip_network(netns.NETWORK)


def beyond_loopback(pids: Iterable[int]) -> list[Listener]:
    """The listeners of ``pids`` (and their groups) that break the loopback rule (:func:`allowed`); [] is good."""
    host_ns = _own_net_ns()
    return [item for item in listeners(pids) if not allowed(item, host_ns)]
