"""Fixtures of the engine's object storage tests: a real SeaweedFS (``weed``), a real
fake-gcs-server (``gcs``) and a real Azurite (``azurite``), each for a test module, and
the standard AWS environment that reaches SeaweedFS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.azurite import AzuriteProcess
from tests.support.fake_gcs import FakeGcsProcess
from tests.support.seaweed import WeedProcess


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedProcess]:
    """A SeaweedFS for the module's tests, with an empty bucket ``data``."""
    with WeedProcess(tmp_path_factory.mktemp("weed")).start() as proc:
        proc.create_bucket("data")
        yield proc


@pytest.fixture
def aws_env(weed: WeedProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard AWS environment, nothing Conveyor-specific."""
    for key, value in weed.env().items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsProcess]:
    """A fake-gcs-server for the module's tests, with an empty bucket ``data``."""
    with FakeGcsProcess(tmp_path_factory.mktemp("gcs")).start() as proc:
        proc.create_bucket("data")
        yield proc


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteProcess]:
    """An Azurite for the module's tests, with an empty container ``data``."""
    with AzuriteProcess(tmp_path_factory.mktemp("azurite")).start() as proc:
        proc.create_container("data")
        yield proc
