"""Deployment artifacts: the health probe that container health checks run, against real
servers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.servers import ServerProcess

Start = Callable[..., ServerProcess]
SERVICE = "conveyor.v1.Conveyor"


# ---- the health probe ------------------------------------------------------------------

def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor_server.probe", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_probe_real_server_serving_and_unknown_service(start_server: Start) -> None:
    server = start_server()
    ok = probe("--address", server.address)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == f"service '{SERVICE}' at {server.address} is SERVING"
    whole = probe("--address", server.address, "--service", "")
    assert whole.returncode == 0 and "the server" in whole.stdout, whole.stdout + whole.stderr
    unknown = probe("--address", server.address, "--service", "conveyor.v1.Nope")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (f"{server.address} does not know service "
                                      "'conveyor.v1.Nope' (NOT_FOUND)")


def test_probe_not_serving() -> None:
    """A health service answering NOT_SERVING (what a draining server says) fails."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    server.start()
    try:
        result = probe("--address", f"127.0.0.1:{port}")
    finally:
        server.stop(0)
    assert result.returncode == 1
    assert result.stderr.strip() == f"service '{SERVICE}' at 127.0.0.1:{port} is NOT_SERVING"


def test_probe_unreachable() -> None:
    with socket.socket() as s:          # a free port that nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    result = probe("--address", address, "--timeout", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.startswith(f"unreachable: no health answer from {address} within 1s"), line
    assert time.monotonic() - start < 15
