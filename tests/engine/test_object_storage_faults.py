"""Faults of a real S3 server (SeaweedFS) under a running pipeline: killed and restarted in
mid-epoch, the pipeline's requests are retried and its batches are the same bytes; killed
for good, a read ends in a ``DataFileError`` naming the key and the cause after its
retries, never a skipped sample; ``503 SlowDown`` answers are retried (past the retries:
UNAVAILABLE naming the URL) and slow answers waited for."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors
from conveyor_server import Pipeline
from conveyor_server.engine.data.object_clients import BucketSettings, ObjectStoreSettings
from conveyor_server.engine.data.object_store import ObjectStores
from tests.engine.test_object_cache import Counted
from tests.engine.test_object_storage import batches, raw
from tests.support.fault_proxy import FaultProxy
from tests.support.images import make_image_folder
from tests.support.seaweed import REGION, WeedProcess


@pytest.fixture
def weed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WeedProcess]:
    with WeedProcess(tmp_path / "weed").start() as proc:
        for key, value in proc.env().items():
            monkeypatch.setenv(key, value)
        proc.create_bucket("data")
        proc.upload_tree("data", make_image_folder(tmp_path / "train", counts=(4, 4)), "train")
        yield proc


def stores(weed: WeedProcess, endpoint: str = "", observer: Counted | None = None,
           **settings: Any) -> ObjectStores:
    bucket = BucketSettings(endpoint=endpoint or weed.endpoint, region=REGION, allow_http=True)
    return ObjectStores(ObjectStoreSettings(default=bucket, **settings), observer)


def test_the_store_restarted_mid_epoch_gives_the_same_batches(weed: WeedProcess) -> None:
    spec = raw(file_root="s3://data/train", random_shuffle=True, prefetch_queue_depth=1,
               batch_size=2)
    with Pipeline(spec, data_roots=["s3://data"], objects=stores(weed)) as pipe:
        expected = batches(pipe, 4)
    # Retries up to ~15 s, backoff at most 1 s: enough for weed to come back (~3 s).
    objects = stores(weed, max_retries=20, backoff_s=0.05, max_backoff_s=1.0)
    with Pipeline(spec, data_roots=["s3://data"], objects=objects) as pipe:
        got = batches(pipe, 1)
        weed.kill()
        restart = threading.Thread(target=weed.start)
        restart.start()
        try:
            got += batches(pipe, 3)
        finally:
            restart.join()
    assert got == expected


def test_a_store_that_stays_down_is_a_data_file_error_naming_the_key(
        weed: WeedProcess) -> None:
    objects = stores(weed, max_retries=2, backoff_s=0.01, connect_timeout_s=0.5)
    spec = raw(file_root="s3://data/train", prefetch_queue_depth=1, batch_size=2)
    with Pipeline(spec, data_roots=["s3://data"], objects=objects) as pipe:
        weed.kill()
        with pytest.raises(errors.DataFileError, match=r"cannot read '<root 0>/train/class_0/"
                           r"img_00\d.jpg' \(bucket 'data', key 'train/class_0/img_00\d.jpg'\): "
                           r"the store did not answer after 2 retries: check the store's "
                           "health") as raised:
            batches(pipe, 1)
    assert raised.value.code == "DATA_LOSS"
    assert pipe.samples_skipped == 0


def test_slow_down_answers_are_retried_and_slow_answers_waited_for(weed: WeedProcess) -> None:
    spec = raw(file_root="s3://data/train", random_shuffle=True, batch_size=2)
    with Pipeline(spec, data_roots=["s3://data"], objects=stores(weed)) as pipe:
        expected = batches(pipe, 4)
    proxy = FaultProxy(weed.s3, refuse=5, delay=0.05)
    observer = Counted()
    try:
        objects = stores(weed, proxy.endpoint, observer, backoff_s=0.01)
        with Pipeline(spec, data_roots=["s3://data"], objects=objects) as pipe:
            assert batches(pipe, 4) == expected
    finally:
        proxy.close()
    assert proxy.refused == 5 and observer.retries == 5


def test_slow_down_past_the_retries_is_unavailable_naming_the_url(weed: WeedProcess) -> None:
    """While the pipeline is built (its listing): UNAVAILABLE, the next step said; at run
    time a read fails as DATA_LOSS naming the key (the store killed, above)."""
    proxy = FaultProxy(weed.s3, refuse=10_000)
    try:
        objects = stores(weed, proxy.endpoint, max_retries=2, backoff_s=0.01)
        with pytest.raises(errors.Unavailable, match=r"file_root 's3://data/train': the store "
                           r"did not answer after 2 retries: check that the store is up"):
            Pipeline(raw(file_root="s3://data/train"), data_roots=["s3://data"],
                     objects=objects)
    finally:
        proxy.close()
    assert proxy.refused == 3  # the request and its 2 retries
