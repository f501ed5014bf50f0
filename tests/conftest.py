"""Shared fixtures: real redis-server processes and generated image data sets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.store.redis_process import RedisProcess

if TYPE_CHECKING:
    from tests.support.servers import Start


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def redis_proc() -> Iterator[RedisProcess]:
    """A private redis-server for one test, which the test may stop, kill or restart."""
    proc = RedisProcess(appendonly=True)
    proc.start()
    try:
        yield proc
    finally:
        # The test is over and its servers are stopped (their fixtures end first): none of
        # its data is read again, so SIGKILL rather than a shutdown that saves it (~0.1 s).
        proc.kill()
        proc.cleanup()


@pytest.fixture
def redis_client(redis_proc: RedisProcess) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_proc.url, socket_timeout=2)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root holding a small class-folder JPEG data set under ``imgs/``."""
    from tests.support.images import make_image_folder

    root = tmp_path_factory.mktemp("dataroot")
    make_image_folder(root / "imgs", counts=(6, 5, 7))
    return root


@pytest.fixture
def start_server(redis_proc: RedisProcess, image_root: Path, tmp_path: Path) -> Iterator[Start]:
    """Start real conveyor-server subprocesses sharing this test's Redis
    (``metrics=True``: serving metrics on a free port, ``server.metrics_url``; ``env``:
    added environment variables; ``tls``: the client's options for a TLS server);
    ``start_server.many(count, ...)`` starts several together (``servers.Start``)."""
    from tests.support.servers import ServerProcess, Start

    started: list[ServerProcess] = []

    def make(*extra: str, roots: list[Path] | None = None, metrics: bool = False,
             env: dict[str, str] | None = None, tls: Any = None) -> ServerProcess:
        server = ServerProcess(redis_proc.url, roots or [image_root], tmp_path, *extra,
                               metrics=metrics, env=env, tls=tls)
        started.append(server)
        return server

    try:
        yield Start(make)
    finally:
        for server in started:
            server.stop()


#: Past this many lines, a module is named at the end of the run: a prompt to check that it
#: still does one job. Not a cap: a module is split by job, never by its size.
LONG_MODULE_LINES = 400


def pytest_terminal_summary(terminalreporter: Any) -> None:
    root = Path(__file__).resolve().parent.parent
    sources = [p for d in ("client/conveyor", "server/conveyor_server", "tests", "bench")
               for p in (root / d).rglob("*.py") if "_pb2" not in p.name]
    long = sorted((n, p.relative_to(root)) for p in sources
                  if (n := len(p.read_text().splitlines())) > LONG_MODULE_LINES)
    if long:
        terminalreporter.write_sep("-", f"modules over {LONG_MODULE_LINES} lines: does each "
                                   "still do one job?")
        for n, path in reversed(long):
            terminalreporter.write_line(f"{path} ({n} lines)")
