"""Real ``conveyor-server`` subprocesses on loopback, for the service tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import conveyor
from conveyor.errors import Unavailable
from conveyor.transport.channel import wait_serving
from conveyor.transport.credentials import TlsOptions
from conveyor_server.demo.launch import (
    launch_server,
    listening_address,
    read_metrics_address,
    stop_server,
)

START_TIMEOUT = 30.0


class ServerProcess:
    def __init__(self, redis_url: str | None, data_roots: list[Path], log_dir: Path,
                 *extra: str, metrics: bool = False,
                 env: Mapping[str, str] | None = None, tls: TlsOptions | None = None) -> None:
        """``env``: variables added to the server's environment (CPU dispatch settings).
        ``tls``: how to reach a server started with TLS (to wait until it serves)."""
        self.redis_url = redis_url
        self.env = dict(env or {})
        self.data_roots = data_roots
        self.extra = extra
        self.metrics = metrics
        self.tls = tls
        self.log_path = log_dir / f"server-{id(self)}.log"
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.metrics_port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        assert self.metrics_port, "start the server with metrics=True"
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> ServerProcess:
        """Start the process and return once it serves."""
        return self.launch().ready()

    def launch(self) -> ServerProcess:
        """Start the process and return at once (``ready`` waits until it serves)."""
        args = ["--host", "127.0.0.1", "--port", "0", "--log-level", "INFO", *self.extra]
        if self.metrics:
            args += ["--metrics-listen", "127.0.0.1:0"]
        if self.redis_url:
            args += ["--redis-url", self.redis_url]
        for root in self.data_roots:
            args += ["--data-root", str(root)]
        env = {k: v for k, v in os.environ.items()
               if k not in ("CONVEYOR_REDIS_URL", "CONVEYOR_METRICS_LISTEN",
                            "CONVEYOR_LOG_FORMAT")}
        env.update(self.env)
        with self.log_path.open("a") as log:
            self.proc = launch_server(args, stderr=log, env=env)
        return self

    def ready(self) -> ServerProcess:
        """Wait until the launched process listens (and serves its metrics) and serves."""
        assert self.proc is not None, "launch() first"
        try:
            address = listening_address(self.proc, START_TIMEOUT)
            if self.metrics:
                metrics = read_metrics_address(self.proc, START_TIMEOUT)
                self.metrics_port = int(metrics.rsplit(":", 1)[1])
        except Unavailable as exc:
            raise RuntimeError(f"{exc.message}\n{self.log()}") from None
        self.port = int(address.rsplit(":", 1)[1])
        wait_serving(self.address, START_TIMEOUT, tls=self.tls)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: a crash, no drain."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM: the drain path. Returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None:
            stop_server(self.proc)


class Start:
    """What the ``start_server`` fixture is. ``start_server(*extra, **options)`` starts a real
    server and returns it once it serves; ``start_server.many(count, *extra, **options)``
    starts ``count`` alike together (their interpreters start and import at the same time)
    and returns them once each serves. ``make(*extra, **options)`` makes an unstarted
    ``ServerProcess`` that the fixture stops at the end."""

    def __init__(self, make: Callable[..., ServerProcess]) -> None:
        self.make = make

    def __call__(self, *extra: str, **options: Any) -> ServerProcess:
        return self.make(*extra, **options).start()

    def many(self, count: int, *extra: str, **options: Any) -> list[ServerProcess]:
        servers = [self.make(*extra, **options).launch() for _ in range(count)]
        return [server.ready() for server in servers]
#: Every call's deadline in the service tests, in seconds.
DEADLINE = 20.0


def client(server: ServerProcess, **kw: Any) -> conveyor.Client:
    """A client of ``server`` alone: its new pipelines are created there, not placed on
    the fleet (``place=True`` to place them)."""
    kw.setdefault("place", False)
    return conveyor.Client(server.address, timeout=DEADLINE, stream_timeout=120, **kw)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
