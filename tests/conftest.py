"""Test harness: find a Redis once per session, export it, and give each test its own keys.

Redis is resolved in ``pytest_sessionstart`` in this order:

1. ``REDIS_URL`` when it is set;
2. a ``redis-server`` spawned by the launcher on a free port;
3. a testcontainers ``RedisContainer`` (pinned image) when a Docker daemon answers;
4. otherwise every test that needs Redis is skipped, and the reason is printed.

The session also points ``LAB_RUN_DIR`` and the ``LAB_*_PORT`` variables at a temporary
directory and free ports, so that notebooks run by nbval (whose kernels inherit the
environment but never see fixtures) start their topologies beside any running lab.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import leak_support
import pluggy
import pytest
import redis
from monitoring_support import MonitoredStack
from port_support import cluster_ports, worker_share, worker_window
from require_support import fail_required_skip, required_areas, skip_area, tagged

from labs.launcher import netns, ports, prom_binaries, topologies
from labs.launcher.cluster import ClusterTopology
from labs.launcher.errors import LauncherError
from labs.launcher.monitoring import Monitoring
from labs.launcher.topology import Topology

REDIS_IMAGE = "redis:7.0.15"


class _Session:
    url: str | None = None
    source: str = ""
    skip_reason: str = ""
    run_dir: Path | None = None
    container: Any = None
    started_ticks: int = 0
    passed: bool = False


def _docker_redis() -> tuple[str | None, str]:
    try:
        docker = importlib.import_module("docker")  # optional, and without type stubs

        docker.from_env().ping()
    except Exception as exc:  # no daemon, no socket, no client: all mean "no Docker"
        return None, f"no Docker daemon answers ({type(exc).__name__})"
    from testcontainers.community.redis import RedisContainer

    container = RedisContainer(REDIS_IMAGE)
    container.start()
    _Session.container = container
    host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
    return f"redis://{host}:{port}/0", f"testcontainers {REDIS_IMAGE}"


def _xdist_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to pytest-xdist workers (it runs none itself)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", 0))


SESSION_TMP_VAR = "LAB_TEST_SESSION_TMP"


def pytest_configure(config: pytest.Config) -> None:
    """One temporary directory per test session, for everything the session and its children make.

    ``TMPDIR`` points into it before pytest picks its ``tmp_path`` root and before xdist starts its
    workers, so every test, notebook kernel, sandbox and server the session starts works under it.
    That is what scopes the check for processes left behind (tests/leak_support.py) to this session: a
    second session on the machine (a grading run, ``make test-matrix``, a developer's own run) has
    servers in ``/tmp`` too, and they are not this session's to judge or kill.
    """
    if hasattr(config, "workerinput") or os.environ.get(SESSION_TMP_VAR):
        return  # an xdist worker inherits the controller's directory
    root = Path(tempfile.mkdtemp(prefix="redis-workbook-session-"))
    os.environ[SESSION_TMP_VAR] = str(root)
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    # Kept when the run failed (pytest's tmp_path folders are in it, for a look); removed when it passed.
    config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True) if _Session.passed else None)


def pytest_sessionstart(session: pytest.Session) -> None:
    _Session.started_ticks = leak_support.now_ticks()
    if _xdist_controller(session.config):
        # Each worker starts a Redis of its own: tests change server-wide settings (output buffer
        # limits, maxmemory, policies) and must not see another worker's. A REDIS_URL the user gave
        # is inherited by the workers and shared, as without xdist.
        _Session.source = "one per xdist worker"
        return
    _Session.run_dir = Path(tempfile.mkdtemp(prefix="redis-workbook-tests-"))
    os.environ["LAB_RUN_DIR"] = str(_Session.run_dir)
    # The namespaces' registry too: a test that runs 'python -m labs down' destroys the fabrics of
    # its registry, and with the checkout's own it took the other xdist worker's running ones with it.
    os.environ[netns.REGISTRY_VAR] = str(_Session.run_dir / "netns")
    # This worker's shares of the port windows, for whatever picks ports later in this process or its
    # children (a grading sandbox, the brokers, a notebook kernel): never another worker's reserved port.
    for var, window in zip(ports.WINDOW_VARS, (worker_window(), worker_share(ports.suite_session_window())),
                           strict=True):
        os.environ[var] = f"{window.start}-{window.stop}"
    # The session's topologies and monitoring on ports of this worker's share (see port_support).
    os.environ.update(ports.port_set())
    if url := os.environ.get("REDIS_URL"):
        _Session.url, _Session.source = url, "REDIS_URL"
        return
    try:
        _Session.url = topologies.from_env("single").ensure().url
        _Session.source = "redis-server spawned by the launcher"
    except LauncherError as exc:
        native = str(exc)
        url, why = _docker_redis()
        if url is None:
            _Session.skip_reason = tagged("redis", f"no Redis: {native}; {why}")
            return
        _Session.url, _Session.source = url, why
    os.environ["REDIS_URL"] = _Session.url


MONITORING_NOTEBOOK = "10_monitoring_and_incidents"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Notebook 10 needs Prometheus and redis_exporter: where they are missing, its cells (nbval) and
    its exercise run (test_edition) are skipped with the one line that says what to install."""
    required_areas()  # a misspelt LAB_REQUIRE stops the run here, before any test
    missing = prom_binaries.missing()
    if not missing:
        return
    for item in items:
        if MONITORING_NOTEBOOK in item.nodeid:
            item.add_marker(pytest.mark.skip(reason=tagged("monitoring", missing)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """LAB_REQUIRE (tests/require_support.py): a skip of a required area becomes a failure."""
    outcome = yield
    fail_required_skip(outcome.get_result(), required_areas())


def pytest_report_header() -> str:
    if _Session.source == "one per xdist worker":
        return "redis: " + (f"{os.environ['REDIS_URL']} (REDIS_URL)" if "REDIS_URL" in os.environ else
                            "each xdist worker starts a redis-server of its own on free ports")
    if _Session.url:
        return f"redis: {_Session.url} ({_Session.source}); lab files under {_Session.run_dir}"
    return f"redis: none, tests that need it are skipped: {_Session.skip_reason}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _Session.run_dir is not None:
        with contextlib.suppress(LauncherError):
            Monitoring.from_env(_Session.run_dir).stop()
        for topo in topologies.iter_topologies(_Session.run_dir):
            with contextlib.suppress(LauncherError):
                topo.stop()
        with contextlib.suppress(LauncherError):
            netns.remove_registered()  # what a failed test left in namespaces of this session
        shutil.rmtree(_Session.run_dir, ignore_errors=True)
    if _Session.container is not None:
        _Session.container.stop()
    if not hasattr(session.config, "workerinput"):  # the controller, or a run without xdist: every test is done
        _fail_on_leftovers(session)
        _Session.passed = session.exitstatus == pytest.ExitCode.OK


def _fail_on_leftovers(session: pytest.Session) -> None:
    """A server or an orphan that a test started and never stopped fails the run (tests/leak_support.py)."""
    left = leak_support.settle_and_kill(_Session.started_ticks, tmp=os.environ.get(SESSION_TMP_VAR))
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) started by the tests outlived them (killed now):",
             *(f"  {p.describe()}" for p in left)]
    if reporter is not None:
        reporter.write_sep("=", "processes left behind", red=True)
        for line in lines:
            reporter.write_line(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The session's Redis (see the module docstring); skips with the reason when there is none."""
    if not _Session.url:
        pytest.skip(_Session.skip_reason)
    return _Session.url


@pytest.fixture
def key_prefix(request: pytest.FixtureRequest, redis_url: str) -> Iterator[str]:
    """A prefix of this test's own; its keys are deleted afterwards (nothing is flushed)."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    prefix = f"test:{name}:{uuid.uuid4().hex[:8]}:"
    yield prefix
    with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A synchronous client with decoded replies, closed after the test."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def topology_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Topology]]:
    """Build and start topologies of this test's own on free ports; all are stopped afterwards."""
    made: list[Topology] = []

    def make(name: str = "single", *, down_after_ms: int = 1000) -> Topology:
        if not shutil.which("redis-server"):
            skip_area("redis", "redis-server is not installed (run 'make setup')")
        topo = topologies.on_free_ports(name, tmp_path_factory.mktemp(name), down_after_ms=down_after_ms)
        made.append(topo)
        topo.ensure()
        return topo

    yield make
    for topo in made:
        topo.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """3 masters + 3 replicas on free ports, shared by one test module (it forms in about 3 s).

    Tests that fail it over or change its settings take :func:`healthy_cluster` instead, which
    makes it whole again afterwards; none may assume which node is a master.
    """
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        skip_area("redis", "redis-server or redis-cli is not installed (run 'make setup')")
    topo = topologies.create("cluster", tmp_path_factory.mktemp("cluster"), server_ports=cluster_ports(6))
    try:
        topo.ensure()
        yield topo
    finally:
        topo.stop()


@pytest.fixture
def healthy_cluster(cluster: ClusterTopology) -> Iterator[ClusterTopology]:
    """The module's cluster; afterwards a killed node is restarted and every replica linked again."""
    yield cluster
    cluster.ensure()


@pytest.fixture
def sentinel_topology(topology_factory: Callable[..., Topology]) -> Topology:
    """Master, replica and three sentinels (quorum 2, down-after 1000 ms) on free ports."""
    return topology_factory("sentinel")


@pytest.fixture(scope="session")
def monitored_stack() -> MonitoredStack:
    """The session's own ``sentinel`` and ``aof`` topologies and the monitoring add-on, on the session's ports.

    The same stack notebook 10 (run by nbval later in the session) finds running and reuses, so it
    starts once. ``pytest_sessionfinish`` stops it with the rest of the run directory. Skipped with
    one line where a binary is missing.
    """
    if reason := prom_binaries.missing():
        skip_area("monitoring", reason)
    if not shutil.which("redis-sentinel"):
        skip_area("redis", "redis-sentinel is not installed (run 'make setup')")
    sentinel, aof = topologies.from_env("sentinel"), topologies.from_env("aof")
    sentinel.ensure()
    aof.ensure()
    mon = Monitoring.from_env()
    mon.ensure()
    mon.wait_targets_up(30)
    return MonitoredStack(mon, sentinel, aof)
