"""One submission's sandbox, from the grader's side: start a job in it, read its report, enforce the limits, clean up.

A :class:`Sandbox` belongs to one submission while it is graded. Each job (one notebook, one
lab checker) is one ``bwrap`` run (:mod:`labs.grading.bwrap`) of :mod:`labs.grading.runner`:
a fresh pid and network namespace, the submission's own ``redis-server`` on its loopback, a
tmpfs of ``disk_mb`` for home, work folder and ``/tmp``, a uid of its own, rlimits (address
space, processes, CPU time, no core files) and, where the machine allows, a cgroup for memory
and tasks as a whole (:mod:`labs.grading.cgroup`). The job's files are copied into a folder of
the grader's that the sandbox sees read-only; what comes back is the runner's report pipe, read
here with a size cap, and its log (stdout and stderr of everything inside), capped as well and
written into the grade's output folder by the grader. Nothing inside can write a file the
grader reads.

:meth:`Sandbox.run` stops a job at its wall limit (the whole pid namespace dies with ``bwrap``:
``--die-with-parent``), and :class:`RunReport` says what happened: wall time, the seconds until
the sandbox and its Redis were up (the overhead), whether a limit ended it, the OOM kills and
refused forks the cgroup counted.

``contained=False`` (``--unsafe-no-sandbox``) runs the same runner as the grader's own user on
the host, with a Redis on a free port: only to measure the sandbox's cost, or where no sandbox
can be made and the instructor trusts every submission. Every process it started is killed
afterwards by the tag in its environment or its working folder (:func:`tagged_pids`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.grading import bwrap, cgroup
from labs.grading.limits import MB, Limits, describe
from labs.launcher import binaries, ports
from labs.polling import poll, seconds_left

log = logging.getLogger(__name__)

TAG_VAR = "LABS_GRADING_SANDBOX"
SANDBOX_PORT = 6379
RESULTS_LIMIT = 64 * MB  # a notebook's report: every cell's outputs, each already cut at output_kb
LOG_LIMIT = 1 * MB  # what the log keeps of everything printed to stdout/stderr inside
KILL_GRACE_S = 10.0
EXITED_GRACE_S = 1.0  # what a job that exited with its report closed gets to finish its log
Event = dict[str, Any]


@dataclass
class RunReport:
    """How one job in the sandbox went."""

    kind: str
    exit_code: int | None = None
    wall_s: float = 0.0
    ready_s: float | None = None  # launch -> the runner's Redis answered (bwrap, Python, Redis): the start-up cost
    timed_out: bool = False
    results_exceeded: bool = False
    peak_memory_bytes: int = 0
    oom_kills: int = 0
    forks_refused: int = 0
    events: int = 0
    log_path: str = ""
    contained: bool = True

    @property
    def finished(self) -> bool:
        return not self.timed_out and not self.results_exceeded and self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def limit_note(self, limits: Limits) -> str | None:
        """What stopped or starved the job, as the feedback says it (None: nothing)."""
        notes = []
        if self.oom_kills:
            notes.append(f"память песочницы ({limits.memory_mb} МБ) исчерпана: процесс остановлен {self.oom_kills} раз")
        if self.forks_refused:
            notes.append(f"предел процессов песочницы ({limits.nproc}) достигнут")
        if self.results_exceeded:
            notes.append(f"вывод ноутбука больше {RESULTS_LIMIT // MB} МБ: проверка остановлена")
        return "; ".join(notes) or None


@dataclass(frozen=True)
class SandboxSpec:
    """What it takes to start jobs in a submission's sandbox: JSON, so that nbgrader's child process can."""

    root: str
    limits: dict[str, int]
    contained: bool = True
    uid: int = 0
    release_dir: str | None = None
    log_dir: str | None = None
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(dataclasses.asdict(self)), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> SandboxSpec:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def tagged_pids(tag: str, root: Path | None = None) -> list[int]:
    """Processes whose environment carries ``TAG_VAR=tag``, or whose working directory is under ``root``
    (redis-server writes its process title over the memory ``/proc/<pid>/environ`` shows; its cwd is its dir)."""
    needle = f"{TAG_VAR}={tag}".encode()
    inside = str(root.resolve()) if root is not None else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0") or (
                    inside is not None and _is_under(os.readlink(entry / "cwd"), inside)):
                found.append(int(entry.name))
    return found


def _is_under(path: str, root: str) -> bool:
    path = path.removesuffix(" (deleted)")
    return path == root or path.startswith(root + os.sep)


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (bwrap's: the sandbox's init), from ``/proc/<pid>/task/*/children``."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    """Still a process, not a zombie (a zombie init: its namespace is empty)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_pids(pids: list[int]) -> int:
    killed = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


class _Reader:
    """The report pipe and the log pipe of one job, read together with caps and a deadline."""

    def __init__(self, results_fd: int, log_fd: int, on_event: Callable[[Event], None], report: RunReport,
                 started: float) -> None:
        self.fds = {results_fd: "results", log_fd: "log"}
        self.started = started
        self.on_event = on_event
        self.report = report
        self.pending = b""
        self.results_bytes = 0
        self.log = bytearray()
        self.log_dropped = 0

    def pump(self, deadline: float, stop: Callable[[], None], exited: Callable[[], bool]) -> None:
        """Read both pipes until they close; at ``deadline`` (checked even while output floods in) ``stop`` the
        job and read what is left for a grace period. Once the job itself ``exited`` and its report closed, a
        process it left holding the log (unsandboxed only) is not waited for."""
        with selectors.DefaultSelector() as selector:
            for fd in self.fds:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            if not poll(lambda: self._read(selector, deadline, stop) or (not self._open(selector, "results")
                                                                          and exited()),
                        seconds_left(deadline), poll_s=0.0):
                self.report.timed_out = True
                stop()
                grace_s = KILL_GRACE_S
            else:
                grace_s = EXITED_GRACE_S  # closed (nothing left to read), or exited with its report closed
            end = time.monotonic() + grace_s
            poll(lambda: self._read(selector, end, stop), grace_s, poll_s=0.0)

    def _open(self, selector: selectors.BaseSelector, name: str) -> bool:
        return name in {self.fds[int(key.fd)] for key in selector.get_map().values()}

    def _read(self, selector: selectors.BaseSelector, until: float, stop: Callable[[], None]) -> bool:
        """One round: read what the pipes hold, waiting at most half a second (never past ``until``) for
        some; True once both pipes closed."""
        if not selector.get_map():
            return True
        for key, _ in selector.select(timeout=min(0.5, seconds_left(until))):
            fd = int(key.fd)
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                selector.unregister(fd)
            elif self.fds[fd] == "results":
                self._results(chunk, stop)
            else:
                self._log(chunk)
        return not selector.get_map()

    def _results(self, chunk: bytes, stop: Callable[[], None]) -> None:
        self.results_bytes += len(chunk)
        if self.results_bytes > RESULTS_LIMIT:
            if not self.report.results_exceeded:
                self.report.results_exceeded = True
                stop()
            return
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.report.events += 1
                if event.get("event") == "ready" and self.report.ready_s is None:
                    self.report.ready_s = time.monotonic() - self.started
                self.on_event(event)

    def _log(self, chunk: bytes) -> None:
        room = LOG_LIMIT - len(self.log)
        self.log += chunk[:max(0, room)]
        self.log_dropped += max(0, len(chunk) - max(0, room))


class Sandbox:
    """A submission's sandboxes (one per job), from the grader's side."""

    _runs = itertools.count()

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.root = Path(spec.root)
        self.limits = Limits.from_json(spec.limits)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lab_env: dict[str, str] = {}

    # -- what runs inside ------------------------------------------------------------------------------------
    def _redis_binary(self) -> Path:
        return Path(binaries.require("redis-server"))

    def _env(self, redis_url: str, home: str, tmp: str) -> dict[str, str]:
        binary = self._redis_binary()
        env = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": home, "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
            "TMPDIR": tmp, "MPLCONFIGDIR": tmp, "REDIS_URL": redis_url, "REDIS_BIN_DIR": str(binary.parent),
            "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime", "IPYTHONDIR": f"{home}/.ipython",
            "JUPYTER_PLATFORM_DIRS": "1", "LAB_RUN_DIR": f"{home}/run", "LAB_REPORTS_DIR": f"{home}/reports",
            "PYTHONDONTWRITEBYTECODE": "1", "MALLOC_ARENA_MAX": "2", "NO_COLOR": "1", "COLUMNS": "240",
        }
        for name in ("REDIS", "TZ"):
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    def _job(self, kind: str, *, notebook: str | None, files: list[str], command: Sequence[str] | None,
             port: int, home: str, input_dir: str) -> dict[str, Any]:
        fill = {"{work}": f"{home}/work", "{redis_url}": f"redis://127.0.0.1:{port}/0", "{python}": sys.executable}
        filled = None
        if command is not None:
            filled = []
            for part in command:
                for key, value in fill.items():
                    part = part.replace(key, value)
                filled.append(part)
        return {
            "kind": kind, "notebook": notebook, "files": files, "command": filled,
            "input_dir": input_dir, "work_dir": f"{home}/work", "tmp_dir": f"{home}/.tmp",
            "redis": {"binary": str(self._redis_binary()), "port": port, "dir": f"{home}/.redis"},
            "limits": self.spec.limits, "contained": self.spec.contained,
        }

    def _rlimits(self) -> dict[str, int]:
        return {"as": self.limits.address_space_bytes, "nproc": self.limits.nproc, "cpu": self.limits.cpu_seconds,
                "core": 0}

    def _unsafe_ports(self) -> dict[str, str]:
        """Host ports of its own for a notebook's topologies (no network namespace without the sandbox)."""
        if not self._lab_env:
            self._lab_env = ports.port_set()
        return self._lab_env

    # -- one job -------------------------------------------------------------------------------------------
    def run(self, name: str, kind: str, *, wall_s: float, on_event: Callable[[Event], None],
            files: Sequence[Path] = (), notebook: Path | None = None,
            command: Sequence[str] | None = None) -> RunReport:
        """Run one job (``kind``: ``notebook`` or ``command``, whose ``{work}``, ``{redis_url}`` and ``{python}``
        are filled in) in a fresh sandbox; ``on_event`` gets each report line; the log goes to
        ``<log_dir>/sandbox-<name>.log`` (or the sandbox folder)."""
        run_dir = self.root / f"{name}-{next(self._runs)}"
        input_dir = run_dir / "in"
        input_dir.mkdir(parents=True)
        names = []
        for path in [*files, *([notebook] if notebook else [])]:
            shutil.copy2(path, input_dir / path.name)
            names.append(path.name)
        input_dir.chmod(0o755)
        for entry in input_dir.iterdir():
            entry.chmod(0o644)
        report = RunReport(kind, contained=self.spec.contained)
        if self.spec.contained:
            home, inside_input, port = bwrap.HOME, bwrap.INPUT, SANDBOX_PORT
        else:
            home, inside_input = str(run_dir / "home"), str(input_dir)
            port = ports.free_port()
        job = self._job(kind, notebook=notebook.name if notebook else None,
                        files=[n for n in names if notebook is None or n != notebook.name], command=command,
                        port=port, home=home, input_dir=inside_input)
        (input_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        (input_dir / "job.json").chmod(0o644)
        env = self._env(f"redis://127.0.0.1:{port}/0", home, f"{home}/.tmp")
        started = time.monotonic()
        results_r, results_w = os.pipe()
        log_r, log_w = os.pipe()
        inner = [sys.executable, "-m", "labs.grading.runner", f"{inside_input}/job.json", str(results_w)]
        group: cgroup.Cgroup | None = None
        try:
            if self.spec.contained:
                layout = cgroup.available()
                if layout is not None:
                    group = cgroup.Cgroup(layout, f"uid{self.spec.uid}-{self.spec.tag}-{run_dir.name}",
                                          self.limits.memory_mb * MB, self.limits.nproc)
                argv = cgroup.wrap(group, bwrap.command(
                    input_dir, inner, uid=self.spec.uid, env=env, rlimits=self._rlimits(),
                    release_dir=Path(self.spec.release_dir) if self.spec.release_dir else None,
                    redis_bin_dir=self._redis_binary().parent, disk_mb=self.limits.disk_mb))
                proc_env: dict[str, str] | None = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            else:
                Path(home, ".tmp").mkdir(parents=True, exist_ok=True)
                argv = inner
                proc_env = {**os.environ, **env, **self._unsafe_ports(), TAG_VAR: self.spec.tag,
                            "PYTHONPATH": str(bwrap.ROOT)}
            proc = subprocess.Popen(argv, env=proc_env, stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w,
                                    pass_fds=(results_w,), start_new_session=True,
                                    cwd=None if self.spec.contained else home)
        except BaseException:
            for fd in (results_r, results_w, log_r, log_w):
                os.close(fd)
            if group is not None:
                group.remove()
            raise
        os.close(results_w)
        os.close(log_w)
        reader = _Reader(results_r, log_r, on_event, report, started)
        try:
            reader.pump(started + wall_s, lambda: self._stop(proc, group), lambda: proc.poll() is not None)
        finally:
            os.close(results_r)
            os.close(log_r)
            self._stop(proc, group, wait_only=not report.timed_out and not report.results_exceeded)
            report.exit_code = proc.returncode
            report.wall_s = time.monotonic() - started
            if group is not None:
                usage = group.usage()
                report.peak_memory_bytes, report.oom_kills = usage.peak_memory_bytes, usage.oom_kills
                report.forks_refused = usage.forks_refused
                if not group.remove():
                    log.warning("sandbox %s: processes left in its cgroup", run_dir.name)
            if not self.spec.contained:
                self._sweep_unsafe(run_dir)
            report.log_path = str(self._write_log(name, run_dir, reader, report))
            shutil.rmtree(run_dir, ignore_errors=True)
        return report

    def _stop(self, proc: subprocess.Popen[bytes], group: cgroup.Cgroup | None, *, wait_only: bool = False) -> None:
        """Kill the job and reap it. bwrap's pid namespace dies with it (``--die-with-parent``), but after bwrap
        itself: the namespace's init is waited for, as the kernel kills and reaps every process of the namespace
        before its init is gone. A cgroup's members are killed as well."""
        if not wait_only:
            inits = _children(proc.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            if not poll(lambda: not any(map(_alive, inits)), KILL_GRACE_S, poll_s=0.02):
                log.warning("sandbox: the pid namespace of %s outlived bwrap by %s s", proc.pid, KILL_GRACE_S)
            if group is not None:
                for procs in group.procs_files:
                    with contextlib.suppress(OSError, ValueError):
                        _kill_pids([int(pid) for pid in procs.read_text().split()])
        try:
            proc.wait(timeout=KILL_GRACE_S if wait_only else None)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _sweep_unsafe(self, run_dir: Path) -> None:
        for _ in range(3):  # a dying parent may still spawn: sweep until nothing is left
            if not _kill_pids(tagged_pids(self.spec.tag, run_dir)):
                break
            time.sleep(0.05)

    def _write_log(self, name: str, run_dir: Path, reader: _Reader, report: RunReport) -> Path:
        log_dir = Path(self.spec.log_dir) if self.spec.log_dir else self.root
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / f"sandbox-{name}.log"
        mode = f"bwrap, uid {self.spec.uid}" if self.spec.contained else "UNSAFE: no sandbox (--unsafe-no-sandbox)"
        layout = cgroup.available() if self.spec.contained else None
        header = [f"# {name}: {report.kind} in a sandbox ({mode}); limits: {describe(self.limits)}",
                  f"# cgroup: {f'v{layout.version}' if layout else 'none (rlimits only)'}"]
        footer = [f"# exit code {report.exit_code}, {report.wall_s:.1f} s wall, ready after {report.ready_s or 0:.2f} "
                  f"s, {report.events} report lines, timed out: {report.timed_out}, report over its cap: "
                  f"{report.results_exceeded}",
                  f"# cgroup: peak memory {report.peak_memory_bytes // MB} MB, OOM kills {report.oom_kills}, "
                  f"refused forks {report.forks_refused}"]
        if reader.log_dropped:
            footer.insert(0, f"# ... {reader.log_dropped} more bytes of output dropped (the log keeps "
                             f"{LOG_LIMIT // MB} MB)")
        text = "\n".join(header) + "\n" + reader.log.decode("utf-8", errors="replace") + "\n" + "\n".join(footer) + "\n"
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text)
        return path


def mode_line(contained: bool) -> str:
    """What the console says about the sandbox before a class is graded."""
    if not contained:
        return ("WARNING: --unsafe-no-sandbox: every submission runs as the grader's own user, with the whole "
                "machine in reach (files, network, processes)")
    layout = cgroup.available()
    extra = f"cgroup v{layout.version} for memory and tasks" if layout else cgroup.unavailable_reason()
    return f"sandbox: bubblewrap, a uid, pid and network namespace per submission; {extra}"
