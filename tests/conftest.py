"""Shared fixtures: real redis-server processes and generated image data sets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from conveyor_server.redis_process import RedisProcess


def _cuda_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
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
