"""A cgroup per sandbox, where the machine lets root make one: its memory and its number of tasks, as a whole.

rlimits count per process (memory) or per uid (processes); a cgroup counts the sandbox as a
whole, the kernel, its Redis and everything they start, tmpfs pages included. Two layouts are
found (:func:`available`):

- cgroup v2 (a Debian 12 host with systemd): ``<mount>/labs-grading/<sandbox>`` with
  ``memory.max``, ``memory.swap.max`` and ``pids.max``; ``memory.events`` says how many
  processes the OOM killer took;
- cgroup v1 (older hosts, some CI machines): one directory per controller,
  ``memory.limit_in_bytes`` and ``pids.max``, ``memory.oom_control`` for the kills.

Where neither can be written (a container without a delegated cgroup) the sandbox keeps its
rlimits alone, and the grader says so once. A process joins the cgroup before ``bwrap`` starts
(:func:`wrap`: a shell writes its own pid, then execs), so nothing escapes it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from labs.polling import poll

PARENT = "labs-grading"


@dataclass(frozen=True)
class Layout:
    """Where the sandboxes' cgroups go: one directory (v2) or one per controller (v1)."""

    version: int
    memory: Path
    pids: Path


def _mounts() -> list[tuple[str, str, set[str]]]:
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                found.append((parts[2], parts[1], set(parts[3].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path, from ``/proc/self/cgroup``."""
    paths = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)


def _v2(mount: str) -> Layout | None:
    """``<mount>/labs-grading`` with memory and pids handed down to its children, or None."""
    root = Path(mount)
    try:
        controllers = set((root / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= controllers:
            return None
        subtree = set((root / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= subtree:
            (root / "cgroup.subtree_control").write_text("+memory +pids")
        parent = root / PARENT
        if not _writable_dir(parent):
            return None
        (parent / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return None
    return Layout(2, parent, parent)


def _v1(mounts: list[tuple[str, str, set[str]]]) -> Layout | None:
    own = _own_paths()
    dirs = {}
    for controller in ("memory", "pids"):
        mount = next((point for kind, point, options in mounts if kind == "cgroup" and controller in options), None)
        if mount is None:
            return None
        parent = Path(mount) / own.get(controller, "/").lstrip("/") / PARENT
        if not _writable_dir(parent):
            return None
        dirs[controller] = parent
    return Layout(1, dirs["memory"], dirs["pids"])


@functools.cache
def available() -> Layout | None:
    """Where this machine lets the grader make cgroups (v2 preferred), or None."""
    if os.geteuid() != 0:
        return None
    mounts = _mounts()
    for kind, point, _ in mounts:
        if kind == "cgroup2" and (layout := _v2(point)) is not None:
            return layout
    return _v1(mounts)


def unavailable_reason() -> str | None:
    """One line when sandboxes get no cgroup here, else None."""
    if available() is not None:
        return None
    return ("no writable cgroup (v2 with memory and pids, or v1 memory and pids) for root: the memory limit is per "
            "process (RLIMIT_AS) and the process limit per uid (RLIMIT_NPROC) only")


def _read_int(path: Path, key: str | None = None) -> int:
    with contextlib.suppress(OSError, ValueError):
        text = path.read_text()
        if key is None:
            return int(text.split()[0])
        match = re.search(rf"^{key}\s+(\d+)$", text, re.MULTILINE)
        return int(match.group(1)) if match else 0
    return 0


@dataclass
class Usage:
    """What a sandbox's cgroup saw: its peak memory, the OOM kills and the refused forks."""

    peak_memory_bytes: int = 0
    oom_kills: int = 0
    forks_refused: int = 0


class Cgroup:
    """One sandbox's cgroup (v1: a directory in each controller's hierarchy)."""

    def __init__(self, layout: Layout, name: str, memory_bytes: int, tasks: int) -> None:
        self.layout = layout
        self.dirs = [layout.memory / name] if layout.memory == layout.pids else [layout.memory / name,
                                                                                  layout.pids / name]
        for path in self.dirs:
            path.mkdir(exist_ok=True)
        memory, pids = self.dirs[0], self.dirs[-1]
        if layout.version == 2:
            (memory / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (memory / "memory.swap.max").write_text("0")
        else:
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # only with swap accounting
                (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        (pids / "pids.max").write_text(str(tasks))

    @property
    def procs_files(self) -> list[Path]:
        return [path / "cgroup.procs" for path in self.dirs]

    def usage(self) -> Usage:
        memory, pids = self.dirs[0], self.dirs[-1]
        if self.layout.version == 2:
            return Usage(_read_int(memory / "memory.peak"), _read_int(memory / "memory.events", "oom_kill"),
                         _read_int(pids / "pids.events", "max"))
        return Usage(_read_int(memory / "memory.max_usage_in_bytes"), _read_int(memory / "memory.oom_control",
                                                                                  "oom_kill"),
                     _read_int(pids / "pids.events", "max"))

    def empty(self) -> bool:
        return all(not path.read_text().strip() for path in self.procs_files if path.exists())

    def remove(self, timeout_s: float = 10.0) -> bool:
        """Wait until every process left (a killed pid namespace takes a moment), remove it; whether it emptied."""
        emptied = poll(self.empty, timeout_s, poll_s=0.02)
        for path in self.dirs:
            with contextlib.suppress(OSError):
                path.rmdir()
        return emptied


def wrap(cgroup: Cgroup | None, argv: list[str]) -> list[str]:
    """``argv`` started inside ``cgroup``: a shell writes its pid into each ``cgroup.procs`` and execs ``argv``."""
    if cgroup is None:
        return argv
    script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *map(str, cgroup.procs_files), "--", *argv]
