"""labs.bench.placement: the bench's poll leaves the consumer's CPU while the consumer runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A process pinned to CPU 0 (as the bench pins itself), with a second thread (as rich's refresh
# thread); a child started before the block, one started inside it; where everything runs.
SCRIPT = """
import json, os, subprocess, sys, threading
from labs.bench.placement import off_the_client_cpus

os.sched_setaffinity(0, {0})
started = threading.Event(); release = threading.Event(); seen = {}
def other():
    started.set(); release.wait(); seen["thread"] = sorted(os.sched_getaffinity(0))
thread = threading.Thread(target=other); thread.start(); started.wait()
before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
with off_the_client_cpus():
    inside = sorted(os.sched_getaffinity(0))
    release.set(); thread.join()
    child = sorted(os.sched_getaffinity(before.pid))
after = sorted(os.sched_getaffinity(0))
before.kill(); before.wait()
print(json.dumps({"inside": inside, "thread": seen["thread"], "child": child, "after": after}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move between")
def test_every_thread_moves_to_the_other_cpus_and_back_and_the_consumer_stays() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True)
    where = json.loads(out.stdout)
    others = sorted(set(range(os.cpu_count() or 1)) - {0})
    assert where["inside"] == others and where["thread"] == others  # the poll and every other thread
    assert where["child"] == [0]  # the consumer, started before, keeps the client CPU
    assert where["after"] == [0]
