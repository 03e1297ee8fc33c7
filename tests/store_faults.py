"""Real faults of a business store, for the tests: a small ext4 filesystem the test mounts (as root).

- **locked**: another process holds ``BEGIN IMMEDIATE`` on the ledgers
  (:func:`billing_support.hold_ledger_lock`);
- **disk full**: a file fills the filesystem until ``ENOSPC`` (:meth:`Disk.fill`);
- **I/O error**: the worker's ``RLIMIT_FSIZE`` drops to one byte (:func:`limit_file_size`):
  every write past it fails with ``EFBIG``, which SQLite reports as ``SQLITE_IOERR_WRITE``;
- **read-only**: ext4 hits an error and the kernel remounts it read-only
  (``errors=remount-ro``, triggered through ``/sys/fs/ext4/<dev>/trigger_fs_error``); the
  operator's repair is a fresh mount of the image (:meth:`Disk.mount_again`), after which only
  a new connection can write: the old one's files stay on the dead mount;
- **bad connection**: the same, repaired before the worker writes again: the store is fine,
  the worker's connection is not.

:func:`disk_or_skip_reason` says in one line why a mechanism cannot run here (not root, no
loop device, no ``mkfs.ext4``). Everything is undone by :meth:`Disk.close`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
from pathlib import Path

from billing_support import wait_until

FILLER = "filler.bin"


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout.strip()


def disk_or_skip_reason() -> str:
    """'' when a loop-mounted ext4 can be made here, else why not (one line)."""
    if os.geteuid() != 0:
        return "mounting a test filesystem needs root"
    for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/dev/loop-control").exists():
        return "no loop devices here (/dev/loop-control is missing)"
    return ""


class Disk:
    """A small ext4 filesystem in an image file, mounted at ``mountpoint`` through a loop device."""

    def __init__(self, root: Path, *, size_mb: int = 24) -> None:
        self.image = root / "disk.img"
        self.mountpoint = root / "mnt"
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with self.image.open("wb") as f:
            f.truncate(size_mb * 1024 * 1024)
        # -m 0: root gets no reserve either. -b 4096: a small filesystem gets 1 KiB blocks by
        # default, and then SQLite's way of allocating the -shm file it maps (one byte written at
        # the end of each 4 KiB page) leaves holes: on a full disk, touching one raises SIGBUS.
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", str(self.image))
        self.devices: list[str] = []
        self._mount()

    def _mount(self) -> None:
        device = _run("losetup", "--find", "--show", str(self.image))
        self.devices.append(device)
        _run("mount", "-o", "errors=remount-ro", device, str(self.mountpoint))

    @property
    def sysfs(self) -> Path:
        return Path("/sys/fs/ext4") / Path(self.devices[-1]).name

    def can_go_read_only(self) -> bool:
        return (self.sysfs / "trigger_fs_error").exists()

    def fill(self) -> None:
        """Write a file until the filesystem has no block left (``ENOSPC``)."""
        chunk = b"\0" * (1 << 20)
        with (self.mountpoint / FILLER).open("wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(chunk)
            with contextlib.suppress(OSError):  # the last few blocks, a page at a time
                while True:
                    f.write(chunk[:4096])

    def unfill(self) -> None:
        (self.mountpoint / FILLER).unlink(missing_ok=True)

    def sync(self, *paths: Path) -> None:
        """fsync these files (a ledger and its ``-wal``), so a crash of the mount keeps what they hold."""
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def go_read_only(self) -> None:
        """An ext4 error: the kernel aborts the journal and remounts the filesystem read-only."""
        (self.sysfs / "trigger_fs_error").write_text("store outage test\n")
        wait_until(self._read_only, 10, f"{self.mountpoint} to turn read-only", poll_s=0.01)

    def _read_only(self) -> bool:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if fields[1] == str(self.mountpoint):
                options = fields[3].split(",")
                return "ro" in options or "emergency_ro" in options  # how Linux 6.x shows a forced ro
        return False

    def mount_again(self) -> None:
        """The operator's repair: detach the dead mount (lazily: the worker's old files stay open
        on it) and mount the image afresh, on a new loop device, at the same place."""
        _run("umount", "--lazy", str(self.mountpoint))
        _run("losetup", "--detach", self.devices[-1])  # freed when the last file on it closes
        self._mount()

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("umount", "--lazy", str(self.mountpoint))
        for device in self.devices:
            with contextlib.suppress(subprocess.CalledProcessError):
                _run("losetup", "--detach", device)
        self.image.unlink(missing_ok=True)


def limit_file_size(pid: int, limit_bytes: int | None) -> None:
    """Set another process's ``RLIMIT_FSIZE`` soft limit (None: no limit). A write past it fails
    with ``EFBIG`` (Python ignores ``SIGXFSZ``, so the process lives on)."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    soft = resource.RLIM_INFINITY if limit_bytes is None else limit_bytes
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
