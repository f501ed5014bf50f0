"""Fixtures of the engine's object storage tests: a real SeaweedFS (``weed``) for a test
module, and the standard AWS environment that reaches it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.seaweed import WeedProcess


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedProcess]:
    """A SeaweedFS for the module's tests, with an empty bucket ``data``."""
    proc = WeedProcess(tmp_path_factory.mktemp("weed")).start()
    try:
        proc.create_bucket("data")
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def aws_env(weed: WeedProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard AWS environment, nothing Conveyor-specific."""
    for key, value in weed.env().items():
        monkeypatch.setenv(key, value)
