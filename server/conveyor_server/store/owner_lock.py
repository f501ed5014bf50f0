"""One owner at a time for a private Redis's directory: an exclusive ``flock`` on
``DIR/owner.lock``, held for as long as the owner runs.

The kernel releases the lock when the holder's process ends, however it ends (``kill -9``
included), so a held lock means a living owner and a free one means none: no stale pid
files to judge. The file also records the holder's pid and its redis-server's pid, which a
refused process names and the next owner reads. The file stays when released: removing it
would let two processes lock two different files of the same name.

``flock`` is advisory and local to one kernel: it binds processes that take it, on this
machine (on NFS, Linux maps it onto the server's byte-range locks).
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from conveyor.errors import FailedPrecondition

LOCK_FILE = "owner.lock"


class DirectoryInUse(FailedPrecondition):
    """Another living process owns the directory."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(f"{directory} is in use by {holder}, which runs a redis-server on "
                         "it: stop that process, or use another directory")


@dataclass(frozen=True)
class OwnerRecord:
    """What the lock file says: the owner's pid and its redis-server's (None: unknown)."""

    pid: int | None = None
    redis_pid: int | None = None


class OwnerLock:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> OwnerRecord:
        """Take the lock or raise ``DirectoryInUse``; returns what the previous owner
        recorded (its redis-server may still run: ``redis_process.py`` decides)."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        # Not inherited by children (O_CLOEXEC, and Popen closes fds): a redis-server
        # holding it would keep the lock after its owner is gone.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd).pid
            os.close(fd)
            raise DirectoryInUse(self.directory, holder) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        previous = _read(fd)
        self.record(None)
        return previous

    def record(self, redis_pid: int | None) -> None:
        """Write this process as the owner, running ``redis_pid``."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is not held")
        data = json.dumps({"pid": os.getpid(), "redis_pid": redis_pid}).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases the lock


def _read(fd: int) -> OwnerRecord:
    """The record in the file; empty fields where it is empty (an owner between lock and
    write) or not a record."""
    raw = os.pread(fd, 4096, 0)
    try:
        fields = json.loads(raw)
    except ValueError:
        return OwnerRecord()
    if not isinstance(fields, dict):
        return OwnerRecord()
    pid, redis_pid = fields.get("pid"), fields.get("redis_pid")
    return OwnerRecord(pid if isinstance(pid, int) else None,
                       redis_pid if isinstance(redis_pid, int) else None)
