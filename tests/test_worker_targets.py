"""labs.launcher.worker_targets: service discovery files, and finding billing-workers by their command lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labs.launcher.worker_targets import WorkerTarget, discover, parse_worker_argv, register, registered, unregister

PY = "/usr/bin/python3"


def test_register_writes_a_file_sd_entry_and_unregister_removes_it(tmp_path: Path) -> None:
    target = WorkerTarget(name="w1", port=9500, stream="nb:orders", group="billing", consumer="w1")
    path = register(tmp_path, target)
    assert json.loads(path.read_text()) == [
        {"targets": ["127.0.0.1:9500"],
         "labels": {"stream": "nb:orders", "group": "billing", "worker": "w1", "consumer": "w1"}}
    ]
    assert registered(tmp_path) == ["w1"]
    assert unregister(tmp_path, "w1") is True
    assert unregister(tmp_path, "w1") is False
    assert registered(tmp_path) == []


@pytest.mark.parametrize("name", ["../x", "a b", ""])
def test_bad_worker_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="worker name"):
        WorkerTarget(name=name, port=9500)


def test_a_worker_of_our_redis_with_metrics_is_found() -> None:
    argv = [PY, "-m", "solutions.billing", "--redis-url", "redis://127.0.0.1:6390/0", "--stream", "s",
            "--metrics-port", "9501", "--consumer", "c7"]
    target = parse_worker_argv(argv, 42, {6390})
    assert target == WorkerTarget(name="pid-42", port=9501, stream="s", group="billing", consumer="c7")


def test_a_worker_through_sentinel_is_matched_by_any_sentinel_port() -> None:
    argv = ["billing-worker", "--sentinel", "127.0.0.1:26390", "--sentinel=127.0.0.1:26391", "--metrics-port=9502"]
    assert parse_worker_argv(argv, 7, {26391}) is not None


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "-m", "solutions.billing", "--redis-url", "redis://127.0.0.1:6390/0"],  # no metrics port
        [PY, "-m", "solutions.billing", "--redis-url", "redis://127.0.0.1:7777/0", "--metrics-port", "1"],  # elsewhere
        [PY, "-m", "solutions.producer", "--metrics-port", "9500"],  # not a worker
    ],
)
def test_other_processes_are_not_workers_of_ours(argv: list[str]) -> None:
    assert parse_worker_argv(argv, 1, {6390}) is None


def test_discover_reads_proc_cmdlines(tmp_path: Path) -> None:
    for pid, argv in ((11, ["billing-worker", "--metrics-port", "9600"]), (12, ["bash"])):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "self").mkdir()
    assert [t.name for t in discover({6390}, tmp_path)] == ["pid-11"]
