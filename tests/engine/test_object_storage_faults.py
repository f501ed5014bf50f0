"""Faults of a real S3 server (SeaweedFS) under a running pipeline: killed and restarted in
mid-epoch, the pipeline's requests are retried and its batches are the same bytes; killed
for good, a read ends in a ``DataFileError`` naming the key and the cause after its
retries, never a skipped sample."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors
from conveyor_server import Pipeline
from conveyor_server.engine.data.object_store import (
    BucketSettings,
    ObjectStores,
    ObjectStoreSettings,
)
from tests.engine.test_object_storage import batches, raw
from tests.support.images import make_image_folder
from tests.support.seaweed import REGION, WeedProcess


@pytest.fixture
def weed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WeedProcess]:
    proc = WeedProcess(tmp_path / "weed").start()
    for key, value in proc.env().items():
        monkeypatch.setenv(key, value)
    try:
        proc.create_bucket("data")
        proc.upload_tree("data", make_image_folder(tmp_path / "train", counts=(4, 4)), "train")
        yield proc
    finally:
        proc.kill()


def stores(weed: WeedProcess, **settings: Any) -> ObjectStores:
    bucket = BucketSettings(endpoint=weed.endpoint, region=REGION, allow_http=True)
    return ObjectStores(ObjectStoreSettings(default=bucket, **settings))


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
