"""compose/ mirrors the native topologies: same roles, ports and settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from labs.launcher import ports, topologies
from labs.launcher.cluster import DEFAULT_NODE_TIMEOUT_MS
from labs.launcher.configs import cluster_lines, sentinel_conf
from labs.launcher.topology import MASTER_NAME, QUORUM

COMPOSE = Path(__file__).resolve().parents[1] / "compose"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / name).read_text())
    assert isinstance(data, dict)
    return data


def _flags(command: list[str]) -> dict[str, list[str]]:
    """``["redis-server", "--port", "6392", "--replicaof", "h", "p"]`` -> {"port": ["6392"], ...}."""
    out: dict[str, list[str]] = {}
    key = ""
    for word in command[1:]:
        if word.startswith("--"):
            key = word[2:]
            out[key] = []
        else:
            out[key].append(word)
    return out


def test_redis_yml_is_redis_7_with_aof_everysec_and_insight() -> None:
    services = _load("redis.yml")["services"]
    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    flags = _flags(redis["command"])
    assert flags["appendonly"] == ["yes"] and flags["appendfsync"] == ["everysec"]
    assert any(p.endswith(f"{ports.DEFAULTS[ports.AOF_PORT_VAR]}:6379") for p in redis["ports"])
    assert services["redisinsight"]["image"].startswith("redis/redisinsight")


def test_sentinel_yml_mirrors_the_native_topology(tmp_path: Path) -> None:
    services = _load("sentinel.yml")["services"]
    native = topologies.create(
        "sentinel",
        tmp_path,
        server_ports=[int(ports.DEFAULTS[ports.MASTER_PORT_VAR]), int(ports.DEFAULTS[ports.REPLICA_PORT_VAR])],
        sentinel_ports=[int(p) for p in ports.DEFAULTS[ports.SENTINEL_PORTS_VAR].split(",")],
    )
    master, replica = (_flags(services[name]["command"]) for name in ("master", "replica"))
    assert master["port"] == [str(native.servers[0].port)]
    assert replica["port"] == [str(native.servers[1].port)]
    assert replica["replicaof"] == ["127.0.0.1", str(native.servers[0].port)]
    for flags in (master, replica):
        assert flags["appendonly"] == ["yes"] and flags["appendfsync"] == ["everysec"]

    sentinels = {name: svc for name, svc in services.items() if name.startswith("sentinel")}
    assert sorted(int(s["environment"]["SENTINEL_PORT"]) for s in sentinels.values()) == [
        s.port for s in native.sentinels
    ]
    script = next(iter(sentinels.values()))["command"][-1]
    native_conf = sentinel_conf(native.sentinels[0], native.servers[0].port, native.down_after_ms).splitlines()
    for line in native_conf:
        if line.startswith("sentinel "):
            assert line in script, f"compose sentinel lacks {line!r}"
    assert f"sentinel monitor {MASTER_NAME} 127.0.0.1 {native.servers[0].port} {QUORUM}" in script
    assert all(svc.get("network_mode") == "host" for svc in services.values())


def test_cluster_yml_mirrors_the_native_topology(tmp_path: Path) -> None:
    services = _load("cluster.yml")["services"]
    defaults = [int(p) for p in ports.DEFAULTS[ports.CLUSTER_PORTS_VAR].split(",")]
    native = topologies.create("cluster", tmp_path, server_ports=defaults)
    nodes = {name: _flags(svc["command"]) for name, svc in services.items() if name.startswith("node-")}
    assert sorted(int(flags["port"][0]) for flags in nodes.values()) == [p.port for p in native.servers]
    settings = [line.split(" ", 1) for line in cluster_lines(DEFAULT_NODE_TIMEOUT_MS) if not line.startswith("#")]
    for flags in nodes.values():
        assert flags["appendonly"] == ["yes"] and flags["appendfsync"] == ["everysec"]
        assert flags["bind"] == ["127.0.0.1"]
        for key, value in settings:
            assert flags[key] == [value], f"compose node lacks {key} {value}"
    init = services["cluster-init"]["command"][-1]
    create = f"redis-cli --cluster create {' '.join(f'127.0.0.1:{p.port}' for p in native.servers)}"
    assert create in init and "--cluster-replicas 1 --cluster-yes" in init
    assert all(svc.get("network_mode") == "host" for svc in services.values())
