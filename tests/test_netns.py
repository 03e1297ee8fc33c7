"""labs.launcher.netns: a partition really drops (silently), a heal restores, nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from netns_support import fabric, skip_without_netns

from labs.launcher import binaries, netns, ports
from labs.launcher.configs import server_conf
from labs.launcher.errors import LauncherError
from labs.launcher.process import RedisProcess

__all__ = ["fabric"]  # the fixture, imported for pytest

pytestmark = pytest.mark.timeout(120)


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


@pytest.fixture
def server_in_b(fabric: netns.Fabric) -> Iterator[RedisProcess]:
    """A redis-server inside member ``b``."""
    port = ports.free_port()
    member = fabric.member("b")
    proc = RedisProcess(f"redis-{port}", port, fabric.home, binaries.require("redis-server"), member.ns, member.ip)
    proc.conf.write_text(server_conf("single", proc, None))
    proc.start("a free port")
    try:
        yield proc
    finally:
        proc.kill(signal.SIGKILL)


def _ping_from(fabric: netns.Fabric, member: str, proc: RedisProcess, timeout_s: float = 0.5) -> redis.Redis:
    return netns.client(fabric.member(member).ns, proc.host, proc.port, timeout_s=timeout_s,
                        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))


def test_a_partition_drops_silently_and_a_heal_restores(fabric: netns.Fabric, server_in_b: RedisProcess) -> None:
    held = _ping_from(fabric, "a", server_in_b)
    bystander = _ping_from(fabric, "c", server_in_b)
    assert held.ping() and bystander.ping()
    fabric.partition(["a"], ["b"])
    # An open connection: the command's packets vanish; no reset comes back, only the client's own timeout.
    with pytest.raises(redis.TimeoutError):
        held.ping()
    # A new connection: the SYN is dropped, so connect times out (a refused port would fail at once).
    fresh = _ping_from(fabric, "a", server_in_b)
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        fresh.ping()
    assert time.monotonic() - started >= 0.4, "the connect failed before its timeout: not a silent drop"
    assert bystander.ping(), "a member on neither side is not partitioned"
    assert "drop" in fabric.rules("b") and "drop" in fabric.rules("a")
    fabric.heal()
    assert fabric.rules("a") == "" and fabric.rules("b") == ""
    assert _ping_from(fabric, "a", server_in_b).ping()
    for client in (held, bystander, fresh):
        client.close()


def test_nothing_is_left_behind(tmp_path: Path) -> None:
    skip_without_netns()
    links_before = _root_links()
    made = netns.Fabric.plan(tmp_path / "f", ["x", "y"])
    made.up()
    made.partition(["x"], ["y"])
    names = [made.hub_ns, made.member("x").ns, made.member("y").ns]
    assert set(names) <= set(netns.list_namespaces())
    assert _root_links() == links_before, "the fabric must not add links to the root namespace"
    made.destroy()
    assert not set(names) & set(netns.list_namespaces())
    assert not (tmp_path / "f" / netns.STATE_FILE).exists()
    assert not (netns.registry_dir() / f"{made.run_id}.json").exists()
    assert _root_links() == links_before


CRASHING_RUN = """
import subprocess, sys, time
from labs.launcher import netns
fabric = netns.Fabric.plan(__import__("pathlib").Path(sys.argv[1]), ["x"])
fabric.up()
subprocess.Popen(fabric.exec_argv("x", ["sleep", "300"]), start_new_session=True)
print(fabric.run_id, flush=True)
time.sleep(300)
"""


def test_a_killed_run_is_cleaned_up_by_remove_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``make down`` does after a crash: the killed run's namespaces (and what runs in them) go."""
    skip_without_netns()
    monkeypatch.setenv(netns.REGISTRY_VAR, str(tmp_path / "registry"))  # only this test's runs
    env = {**os.environ, netns.REGISTRY_VAR: str(tmp_path / "registry")}
    run = subprocess.Popen([sys.executable, "-c", CRASHING_RUN, str(tmp_path / "crashed")], stdout=subprocess.PIPE,
                           text=True, env=env, cwd=Path(__file__).resolve().parents[1])
    try:
        assert run.stdout is not None
        run_id = run.stdout.readline().strip()
        assert run_id, "the crashing run did not start"
    finally:
        run.kill()
        run.wait()
    mine = [ns for ns in netns.list_namespaces() if f"-{run_id}-" in ns]
    assert len(mine) == 2 and any(netns.namespace_pids(ns) for ns in mine)
    removed = netns.remove_registered()
    assert set(mine) <= set(removed)
    assert not [ns for ns in netns.list_namespaces() if f"-{run_id}-" in ns]
    assert not list((tmp_path / "registry").glob("*.json"))


def test_a_member_on_both_sides_is_refused(fabric: netns.Fabric) -> None:
    with pytest.raises(LauncherError, match="both sides"):
        fabric.partition(["a", "b"], ["b"])
    with contextlib.suppress(LauncherError):
        fabric.heal()


def test_a_saved_cluster_state_from_other_addresses_is_recognised(tmp_path: Path) -> None:
    """``up cluster --netns`` after a plain run (or back) must form a new cluster, not reuse nodes.conf."""
    from labs.launcher.cluster import _saved_hosts

    proc = RedisProcess("redis-7000", 7000, tmp_path, "redis-server")
    proc.data_dir.mkdir()
    assert _saved_hosts(proc) == set()
    (proc.data_dir / "nodes.conf").write_text(
        "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n"
        "b2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922\n"
        "vars currentEpoch 2 lastVoteEpoch 0\n"
    )
    assert _saved_hosts(proc) == {"127.0.0.1"}


def test_call_in_runs_in_the_namespace_and_accepts_sees_what_listens_there(
        fabric: netns.Fabric, server_in_b: RedisProcess) -> None:
    here = os.readlink("/proc/thread-self/ns/net")
    inside = netns.call_in(fabric.member("a").ns, lambda: os.readlink("/proc/thread-self/ns/net"))
    assert inside != here and os.readlink("/proc/thread-self/ns/net") == here  # the caller's thread never moved
    assert netns.accepts(fabric.member("a").ns, server_in_b.host, server_in_b.port)
    assert not netns.accepts(fabric.member("a").ns, server_in_b.host, server_in_b.port + 1)
    with pytest.raises(ZeroDivisionError):  # the function's error reaches the caller
        netns.call_in(fabric.member("a").ns, lambda: 1 // 0)
