"""Build a topology by name: ``single``, ``aof``, ``sentinel`` or ``cluster``, typed per name.

:class:`~labs.launcher.topology.Topology` is the base of every topology and
:class:`~labs.launcher.cluster.ClusterTopology` builds on it, so the factory that knows them all
lives here, above both: ``create("cluster", ...)`` is a ``ClusterTopology`` and
``from_env("sentinel")`` a ``SentinelTopology`` to the type checker too, and no caller downcasts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal, overload

from labs.launcher import ports
from labs.launcher.cluster import ClusterTopology
from labs.launcher.errors import LauncherError
from labs.launcher.topology import TOPOLOGIES, SentinelTopology, Topology, default_run_dir

__all__ = ["TOPOLOGIES", "create", "from_env", "iter_topologies", "on_free_ports"]


@overload
def create(name: Literal["cluster"], run_dir: Path, *, server_ports: list[int], sentinel_ports: list[int] | None = ...,
           port_vars: dict[int, str] | None = ..., down_after_ms: int = ..., extra_config: tuple[str, ...] = ...,
           netns: bool = ...) -> ClusterTopology: ...
@overload
def create(name: Literal["sentinel"], run_dir: Path, *, server_ports: list[int], sentinel_ports: list[int] | None = ...,
           port_vars: dict[int, str] | None = ..., down_after_ms: int = ..., extra_config: tuple[str, ...] = ...,
           netns: bool = ...) -> SentinelTopology: ...
@overload
def create(name: str, run_dir: Path, *, server_ports: list[int], sentinel_ports: list[int] | None = ...,
           port_vars: dict[int, str] | None = ..., down_after_ms: int = ..., extra_config: tuple[str, ...] = ...,
           netns: bool = ...) -> Topology: ...
def create(
    name: str,
    run_dir: Path,
    *,
    server_ports: list[int],
    sentinel_ports: list[int] | None = None,
    port_vars: dict[int, str] | None = None,
    down_after_ms: int = 1000,
    extra_config: tuple[str, ...] = (),
    netns: bool = False,
) -> Topology:
    """The topology ``name`` on these ports under ``run_dir/<name>/`` (nothing starts yet)."""
    if name == "cluster":
        cluster = ClusterTopology.build(run_dir, server_ports, port_vars=port_vars, extra_config=extra_config)
        return cluster.in_namespaces() if netns else cluster
    if name not in TOPOLOGIES:
        raise LauncherError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
    return Topology.create(name, run_dir, server_ports=server_ports, sentinel_ports=sentinel_ports,
                           port_vars=port_vars, down_after_ms=down_after_ms, extra_config=extra_config, netns=netns)


@overload
def from_env(name: Literal["cluster"], run_dir: Path | None = ..., *, netns: bool = ...) -> ClusterTopology: ...
@overload
def from_env(name: Literal["sentinel"], run_dir: Path | None = ..., *, netns: bool = ...) -> SentinelTopology: ...
@overload
def from_env(name: str, run_dir: Path | None = ..., *, netns: bool = ...) -> Topology: ...
def from_env(name: str, run_dir: Path | None = None, *, netns: bool = False) -> Topology:
    """The topology on its documented ports (see :mod:`labs.launcher.ports`), env overrides applied.

    ``netns`` puts each process in a network namespace; a topology started that way is found so again.
    """
    if name != "cluster":
        return Topology.from_env(name, run_dir, netns=netns)
    run = run_dir or default_run_dir()
    netns = netns or (Path(run).resolve() / name / "netns.json").exists()
    nodes = ports.from_env(ports.CLUSTER_PORTS_VAR)
    return create("cluster", run, server_ports=nodes, port_vars=dict.fromkeys(nodes, ports.CLUSTER_PORTS_VAR),
                  netns=netns)


@overload
def on_free_ports(name: Literal["cluster"], run_dir: Path, *, down_after_ms: int = ..., netns: bool = ...,
                  extra_config: tuple[str, ...] = ...) -> ClusterTopology: ...
@overload
def on_free_ports(name: Literal["sentinel"], run_dir: Path, *, down_after_ms: int = ..., netns: bool = ...,
                  extra_config: tuple[str, ...] = ...) -> SentinelTopology: ...
@overload
def on_free_ports(name: str, run_dir: Path, *, down_after_ms: int = ..., netns: bool = ...,
                  extra_config: tuple[str, ...] = ...) -> Topology: ...
def on_free_ports(name: str, run_dir: Path, *, down_after_ms: int = 1000, netns: bool = False,
                  extra_config: tuple[str, ...] = ()) -> Topology:
    """The same topology on ports the kernel says are free (tests run beside a lab)."""
    if name == "cluster":
        return create(name, run_dir, server_ports=ports.free_cluster_ports(6), netns=netns, extra_config=extra_config)
    return Topology.on_free_ports(name, run_dir, down_after_ms=down_after_ms, netns=netns, extra_config=extra_config)


def iter_topologies(run_dir: Path | None = None) -> Iterator[Topology]:
    """Every topology on its configured ports (for ``down`` and ``status`` without a name)."""
    for name in TOPOLOGIES:
        yield from_env(name, run_dir)
