"""Shared fixtures: real redis-server processes and generated image data sets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from conveyor_server.engine.devices import cuda_device_count
from conveyor_server.store.redis_process import RedisProcess

if TYPE_CHECKING:
    from tests.servers import ServerProcess


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
    from tests.images import make_image_folder

    root = tmp_path_factory.mktemp("dataroot")
    make_image_folder(root / "imgs", counts=(6, 5, 7))
    return root


@pytest.fixture
def start_server(
    redis_proc: RedisProcess, image_root: Path, tmp_path: Path
) -> Iterator[Callable[..., ServerProcess]]:
    """Start real conveyor-server subprocesses sharing this test's Redis
    (``metrics=True``: serving metrics on a free port, ``server.metrics_url``; ``env``:
    added environment variables; ``tls``: the client's options for a TLS server)."""
    from tests.servers import ServerProcess

    started: list[ServerProcess] = []

    def start(*extra: str, roots: list[Path] | None = None, metrics: bool = False,
              env: dict[str, str] | None = None, tls: Any = None) -> ServerProcess:
        server = ServerProcess(redis_proc.url, roots or [image_root], tmp_path, *extra,
                               metrics=metrics, env=env, tls=tls)
        started.append(server.start())
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
