"""Start ``conveyor-server`` as a subprocess, read the address it listens on, and stop it:
for the demo, the tests and the benchmarks (``conveyor.transport.channel.wait_serving`` waits until
it serves)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from conveyor.errors import Unavailable
from conveyor_server.store.redis_process import terminate


def spawn_server(
    args: Sequence[str], *, stderr: IO[str] | int | None = None,
    env: Mapping[str, str] | None = None, timeout: float = 60.0,
) -> tuple[subprocess.Popen[str], str]:
    """Run ``python -m conveyor_server.app.main ARGS`` (use ``--port 0`` for a free port) and
    read the line it prints once listening. Returns the process and "127.0.0.1:PORT".
    On failure the process is gone and ``Unavailable`` says what it printed."""
    proc = launch_server(args, stderr=stderr, env=env)
    return proc, listening_address(proc, timeout)


def launch_server(args: Sequence[str], *, stderr: IO[str] | int | None = None,
                  env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """``spawn_server``'s first half: start the process and return at once (several servers
    started together import at the same time); ``listening_address`` waits for it."""
    return subprocess.Popen([sys.executable, "-m", "conveyor_server.app.main", *args],
                            stdout=subprocess.PIPE, stderr=stderr, text=True,
                            stdin=subprocess.DEVNULL, env=env)


def listening_address(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """``spawn_server``'s second half: "127.0.0.1:PORT" once ``proc`` says it listens. On
    failure the process is gone and ``Unavailable`` says what it printed."""
    line = _read_line(proc, timeout)
    if "listening on" not in line:
        _kill(proc)
        raise Unavailable(f"conveyor-server did not start within {timeout:.0f}s: "
                          f"{line.strip() or 'no output'}")
    return "127.0.0.1:" + line.split()[3].rsplit(":", 1)[1]


def read_metrics_address(proc: subprocess.Popen[str], timeout: float = 10.0) -> str:
    """For a server started by ``spawn_server`` with ``--metrics-listen``: read the line it
    prints next (``conveyor-server metrics on HOST:PORT``) and return "127.0.0.1:PORT".
    On failure the process is gone and ``Unavailable`` says what it printed."""
    return _read_address(proc, "metrics", timeout)


def read_health_address(proc: subprocess.Popen[str], timeout: float = 10.0) -> str:
    """The same for ``--health-listen`` (``conveyor-server health on HOST:PORT``), printed
    after the metrics line."""
    return _read_address(proc, "health", timeout)


def _read_address(proc: subprocess.Popen[str], what: str, timeout: float) -> str:
    line = _read_line(proc, timeout)
    if not line.startswith(f"conveyor-server {what} on "):
        _kill(proc)
        raise Unavailable(f"conveyor-server printed no {what} address within "
                          f"{timeout:.0f}s: {line.strip() or 'no output'}")
    return "127.0.0.1:" + line.split()[3].rsplit(":", 1)[1]


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The next line of the process's stdout, or "" if none comes within ``timeout``."""
    assert proc.stdout is not None
    stdout = proc.stdout
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return line[0] if line else ""


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def stop_server(proc: subprocess.Popen[str], timeout: float = 15.0) -> None:
    """SIGTERM (the drain), then SIGKILL if it takes longer than ``timeout``."""
    terminate(proc, timeout)
    if proc.stdout is not None:
        proc.stdout.close()
