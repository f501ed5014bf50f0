"""Real ``conveyor-server`` subprocesses on loopback, for the service tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

START_TIMEOUT = 30.0


class ServerProcess:
    def __init__(self, redis_url: str | None, data_roots: list[Path], log_dir: Path,
                 *extra: str) -> None:
        self.redis_url = redis_url
        self.data_roots = data_roots
        self.extra = extra
        self.log_path = log_dir / f"server-{id(self)}.log"
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        args = [sys.executable, "-m", "conveyor_server.main", "--host", "127.0.0.1",
                "--port", "0", "--log-level", "INFO", *self.extra]
        if self.redis_url:
            args += ["--redis-url", self.redis_url]
        for root in self.data_roots:
            args += ["--data-root", str(root)]
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True,
                                         stdin=subprocess.DEVNULL,
                                         env={k: v for k, v in os.environ.items()
                                              if k != "CONVEYOR_REDIS_URL"})
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(START_TIMEOUT)
        if not line or "listening on" not in line[0]:
            self.kill()
            raise RuntimeError(f"server did not start: {line!r}\n{self.log()}")
        self.port = int(line[0].split()[3].rsplit(":", 1)[1])
        self.wait_serving()
        return self

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server not SERVING after {timeout}s\n{self.log()}")
                time.sleep(0.02)

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
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.terminate(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
