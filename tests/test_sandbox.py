"""labs.grading.sandbox: each submission's own Redis refuses what would end or wipe it, and nothing outlives it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from labs.grading.sandbox import Sandbox, tagged_pids
from labs.launcher import binaries
from labs.launcher.ports import free_ports, session_port_window
from labs.launcher.process import stat_fields
from labs.polling import wait_until

pytestmark = pytest.mark.timeout(60)


def test_two_sandboxes_have_their_own_redis_and_refuse_flushall_shutdown_debug(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "a") as a, Sandbox(tmp_path / "b") as b:
        assert a.port != b.port
        env_a, env_b = a.env(), b.env()
        for var in ("LAB_RUN_DIR", "LAB_SENTINEL_MASTER_PORT", "LAB_CLUSTER_PORTS", "TMPDIR", "REDIS_URL"):
            assert env_a[var] != env_b[var], var  # a notebook's own topologies never meet the other's
        ra, rb = redis.Redis.from_url(a.redis_url), redis.Redis.from_url(b.redis_url)
        rb.set("kept", "1")
        for command in (("FLUSHALL",), ("FLUSHDB",), ("SHUTDOWN", "NOSAVE"), ("DEBUG", "SEGFAULT"),
                        ("REPLICAOF", "127.0.0.1", str(b.port))):
            with pytest.raises(redis.ResponseError):
                ra.execute_command(*command)
        with pytest.raises(redis.ResponseError):
            ra.eval("return redis.call('FLUSHALL')", 0)  # a script is held to the same ACL
        assert a.redis_alive() and rb.get("kept") == b"1"


def _alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def test_everything_started_in_a_sandbox_is_killed_even_in_its_own_session(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "s") as box:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=box.env(),
                                 start_new_session=True)
        # An experiment's own redis-server: Redis writes its process title over the environment /proc shows,
        # so the tag is not there; its working directory (its dir) is under the sandbox.
        data = box.root / "tmp" / "experiment"
        data.mkdir(parents=True)
        port = free_ports(1, session_port_window())[0]
        server = subprocess.Popen([binaries.require("redis-server"), "--port", str(port), "--dir", str(data),
                                   "--save", ""], env=box.env(), start_new_session=True, stdout=subprocess.DEVNULL)
        own_redis = box._redis
        assert own_redis is not None
        wait_until(lambda: {child.pid, server.pid, own_redis.pid} <= set(tagged_pids(box.tag, box.root)), 10,
                   "the sandbox to see its processes")
        tag, root = box.tag, box.root
    assert child.wait(timeout=10) < 0 and server.wait(timeout=10) < 0  # killed by a signal
    assert not _alive(own_redis.pid), "the sandbox's own redis-server outlived it"
    assert tagged_pids(tag, root) == []
