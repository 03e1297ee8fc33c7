"""The bubblewrap command line of one sandbox: what a submission sees, and as whom it runs.

``bwrap`` (Debian's ``bubblewrap``, the sandbox Flatpak uses) starts as root, builds a root
filesystem of its own in new mount, pid, network, ipc and uts namespaces, and runs
``prlimit`` (the rlimits) and ``setpriv`` there, which drops to a uid of the sandbox's own (no capabilities, no groups,
``no_new_privs``) before the runner (:mod:`labs.grading.runner`) starts. What the submission
sees (:func:`mounts`):

- read-only: ``/usr``, ``/etc`` and the merged ``/bin`` ``/lib`` links, the Python the venv was
  made from, the venv itself, the two packages a kernel imports (``labs/`` and ``solutions/``,
  bound one by one: the rest of the checkout, ``notebooks/`` with the answer key, is not
  there), the released student edition in the place of ``notebooks/`` (what ``reset("NN.K")``
  reads), the Redis binaries, and the job's own input folder (its notebook or lab file);
- read-write: one tmpfs of ``disk_mb`` for its home, work folder and ``/tmp`` (a symlink into
  it; where the checkout or the venv lies under ``/tmp``, ``/tmp`` is a small tmpfs of its own
  that holds their binds), a small ``/dev/shm``; nothing on the host's disks;
- its own ``/proc`` (only its processes), a minimal ``/dev``, a loopback of its own and no
  other interface: no server of the machine, no other sandbox, no internet.

Why a uid of its own and not ``--unshare-user --uid N``: from root, bwrap maps the inside uid to
root outside, and the kernel does not enforce ``RLIMIT_NPROC`` for root's real uid. Each
sandbox that runs at the same time gets another uid (:class:`UidPool`), so the process limit of
one never counts another's processes.
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = "/home/student"
WORK = f"{HOME}/work"
TMP = f"{HOME}/.tmp"
INPUT = "/sandbox/in"
PACKAGES = ("labs", "solutions")
SHM_MB = 64
# far above any real or subordinate uid, below 2**31; a grading run takes a block of 100 by its pid
UID_BASE = 2_000_000_000
UID_BLOCK = 100
INSTALL_HINT = "install Debian's bubblewrap (apt-get install bubblewrap; make setup does it as root)"


def find_bwrap() -> str | None:
    """The ``bwrap`` binary, or None."""
    return shutil.which("bwrap")


def unavailable_reason() -> str | None:
    """Why a sandbox cannot be made here (one line), or None when it can."""
    if sys.platform != "linux":
        return f"the grading sandbox needs Linux namespaces (this is {sys.platform})"
    if find_bwrap() is None:
        return f"no bwrap on PATH: {INSTALL_HINT}"
    for tool in ("setpriv", "prlimit"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (Debian's util-linux): the sandbox cannot drop to a uid and limits of its own"
    if os.geteuid() != 0:
        return "the grading sandbox runs each submission as a uid of its own, which needs root (run make grade as root)"
    return None


class UidPool:
    """The uids of the sandboxes that run at the same time: one each, given back when the sandbox ends."""

    def __init__(self, size: int, base: int | None = None) -> None:
        if base is None:  # two grading runs at once take two blocks (RLIMIT_NPROC counts per uid)
            base = UID_BASE + (os.getpid() % 1_000_000) * UID_BLOCK
        self.base = base
        self.size = min(size, UID_BLOCK)
        self._free: queue.Queue[int] = queue.Queue()
        for uid in range(base, base + self.size):
            self._free.put(uid)

    @property
    def uids(self) -> range:
        return range(self.base, self.base + self.size)

    @contextmanager
    def lease(self) -> Iterator[int]:
        uid = self._free.get()
        try:
            yield uid
        finally:
            self._free.put(uid)


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    return args


def python_dirs() -> list[Path]:
    """The venv and the Python it was made from (a pyenv under /root, say): both read-only inside."""
    dirs = [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent.parent]
    kept: list[Path] = []
    for path in dirs:
        resolved = path.resolve()
        if not any(resolved.is_relative_to(str(other)) for other in (*kept, Path("/usr"))):
            kept = [other for other in kept if not other.is_relative_to(resolved)] + [resolved]
    return kept


def _ro_bind(source: Path, target: Path, made: set[Path], bound: list[Path]) -> list[str]:
    """``--ro-bind``, its missing parents made first as ``0755`` (bwrap makes them ``0700``: the sandbox's uid
    could not walk into ``/root/.pyenv/...`` or ``/work/main/labs``)."""
    args = []
    for parent in reversed(target.parents):
        if parent == Path("/") or parent in made or any(parent.is_relative_to(str(b)) for b in bound):
            continue
        args += ["--perms", "0755", "--dir", str(parent)]
        made.add(parent)
    bound.append(target)
    return [*args, "--ro-bind", str(source), str(target)]


def mounts(input_dir: Path, *, release_dir: Path | None, redis_bin_dir: Path | None, disk_mb: int) -> list[str]:
    """Every filesystem argument of the sandbox (see the module docstring)."""
    args = _system_mounts()
    made: set[Path] = set()
    bound = [Path("/usr"), Path("/etc")]
    binds = [(path, path) for path in python_dirs()]
    binds += [(ROOT / package, ROOT / package) for package in PACKAGES]
    if release_dir is not None:
        binds.append((release_dir, ROOT / "notebooks"))
    if redis_bin_dir is not None and not redis_bin_dir.resolve().is_relative_to("/usr"):
        binds.append((redis_bin_dir.resolve(), redis_bin_dir.resolve()))
    binds.append((input_dir, Path(INPUT)))
    # A checkout (or a venv) under /tmp is bound under /tmp: there /tmp is a small tmpfs of its own
    # (made before the binds, which go inside it), not the link into the home.
    tmp_holds_binds = any(target.is_relative_to("/tmp") for _, target in binds)
    if tmp_holds_binds:
        args += ["--perms", "1777", "--size", str(min(SHM_MB, disk_mb) * 1024 * 1024), "--tmpfs", "/tmp"]
        made.add(Path("/tmp"))
    for source, target in binds:
        args += _ro_bind(source, target, made, bound)
    size = str(disk_mb * 1024 * 1024)
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", str(min(SHM_MB, disk_mb) * 1024 * 1024), "--tmpfs", "/dev/shm",
        "--perms", "0755", "--dir", str(Path(HOME).parent),
        "--perms", "1777", "--size", size, "--tmpfs", HOME,
    ]
    if not tmp_holds_binds:
        args += ["--symlink", TMP, "/tmp"]
    return args


def command(input_dir: Path, inner: list[str], *, uid: int, env: dict[str, str], rlimits: dict[str, int],
            release_dir: Path | None, redis_bin_dir: Path | None, disk_mb: int) -> list[str]:
    """``bwrap ... prlimit ... setpriv ... <inner>``: ``inner`` runs as ``uid`` in the sandbox with exactly
    ``env`` and the ``rlimits`` (prlimit's names: ``nproc``, ``as``, ``cpu``, ``core``...)."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise RuntimeError(f"no bwrap on PATH: {INSTALL_HINT}")
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox", "--die-with-parent", "--new-session", "--clearenv"]
    args += mounts(input_dir, release_dir=release_dir, redis_bin_dir=redis_bin_dir, disk_mb=disk_mb)
    for name, value in sorted(env.items()):
        args += ["--setenv", name, value]
    args += ["--chdir", HOME]
    prlimit = [shutil.which("prlimit") or "prlimit", *(f"--{name}={value}:{value}" for name, value in rlimits.items()),
               "--"]
    setpriv = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
               "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return [*args, "--", *prlimit, *setpriv, *inner]
