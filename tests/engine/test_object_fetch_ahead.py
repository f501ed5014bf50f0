"""Fetching ahead from a real S3 server (SeaweedFS on loopback), for every reader that reads
objects: as each batch starts, what its samples will read (whole objects: ``readers.file``'s
files, numpy arrays, COCO images; byte ranges: TFRecord records, WebDataset samples) is
requested at once through the pipeline's one ``FetchAhead``, and each worker's read takes
it (counted as a hit). The batches are those of the same data in a folder; what is
fetched ahead stays within its bounds, a seek drops it, and a request that failed is the
read's error naming the bucket and key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors
from conveyor_server import Pipeline
from conveyor_server.engine.data.fetch_ahead import FetchAhead
from conveyor_server.engine.data.object_clients import BucketSettings, ObjectStoreSettings
from conveyor_server.engine.data.object_store import ObjectStores
from tests.engine.test_object_cache import Counted
from tests.engine.test_object_storage import raw
from tests.engine.test_readers_coco import coco
from tests.engine.test_readers_numpy import arrays
from tests.engine.test_readers_tfrecord import records
from tests.engine.test_readers_webdataset import wds
from tests.support import record_data
from tests.support.fault_proxy import FaultProxy
from tests.support.images import make_image_folder
from tests.support.reader_data import make_npy_folder, make_shards
from tests.support.resume import batch_bytes, run_batches
from tests.support.seaweed import REGION, WeedProcess

BATCH = 4
#: Batches read: over an epoch's end for every data set (8 or 12 samples).
BATCHES = 5


def _tfrecord(base: str, **kw: Any) -> Any:
    files = [f"{base}/tf/part-{f}.tfrecord" for f in range(2)]
    return records(files, [f.removesuffix(".tfrecord") + ".idx" for f in files], **kw)


#: Each reader's pipeline over the data below ``base`` (a folder, or s3://data).
SPECS: dict[str, Callable[..., Any]] = {
    "file": lambda base, **kw: raw(file_root=f"{base}/files", **kw),
    "tfrecord": _tfrecord,
    "webdataset": lambda base, **kw: wds([f"{base}/wds/shard-{s:04d}.tar" for s in range(2)],
                                         **kw),
    "numpy": lambda base, **kw: arrays(file_root=f"{base}/npy", **kw),
    "coco": lambda base, **kw: coco(f"{base}/coco/images", f"{base}/coco/annotations.json",
                                    **kw),
}


def spec(reader: str, base: str, **kw: Any) -> Any:
    return SPECS[reader](base, random_shuffle=True, batch_size=BATCH, **kw)


@pytest.fixture(scope="module")
def data(weed: WeedProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every reader's data set in a folder, and the same files below ``s3://data``."""
    root = tmp_path_factory.mktemp("local")
    make_image_folder(root / "files", counts=(4, 4))
    record_data.write_tfrecords(root / "tf", [6, 6])
    make_shards(root / "wds", [6, 6])
    make_npy_folder(root / "npy", count=8)
    record_data.write_coco(root / "coco", 8)
    weed.upload_tree("data", root, "")
    return root


def stores(weed: WeedProcess, observer: Counted | None = None, endpoint: str = "",
           **settings: Any) -> ObjectStores:
    bucket = BucketSettings(endpoint=endpoint or weed.endpoint, region=REGION, allow_http=True)
    return ObjectStores(ObjectStoreSettings(default=bucket, **settings), observer)


def ahead_of(pipe: Pipeline) -> FetchAhead:
    """The pipeline's one FetchAhead (its readers share it)."""
    return next(iter(pipe._plan.readers.values())).files.ahead


@contextmanager
def holding(proxy: FaultProxy) -> Iterator[None]:
    """The proxy holds every request sent in the block (released on the way out, also on a
    failure, so that the pipeline's close does not wait on them)."""
    proxy.hold()
    try:
        yield
    finally:
        proxy.release()


def read(pipe: Pipeline, count: int) -> list[Any]:
    return [batch_bytes(b) for b in run_batches(pipe, count)]


@pytest.fixture(scope="module")
def expected(data: Path) -> dict[str, list[Any]]:
    """Each reader's batches from the folder (whose pipelines fetch nothing ahead)."""
    out = {}
    for reader in SPECS:
        with Pipeline(spec(reader, str(data)), data_roots=[data]) as pipe:
            out[reader] = read(pipe, BATCHES)
            binding = next(iter(pipe._plan.readers.values()))
            assert not binding.reads_objects and binding.files._ahead is None
    return out


@pytest.mark.parametrize("reader", list(SPECS))
def test_every_read_takes_what_was_fetched_ahead(weed: WeedProcess, data: Path,
                                                 aws_env: None, reader: str,
                                                 expected: dict[str, list[Any]]) -> None:
    """Each sample's object (or byte range) was requested as its batch started, before a
    worker asked for it: every read is a hit (samples read twice across an epoch's end
    too), and nothing is left held once the batches computed ahead are done."""
    observer = Counted()
    with Pipeline(spec(reader, "s3://data"), data_roots=["s3://data"],
                  objects=stores(weed, observer)) as pipe:
        assert next(iter(pipe._plan.readers.values())).reads_objects
        assert read(pipe, BATCHES) == expected[reader]
        pipe.wait_prefetched()
        assert ahead_of(pipe).held == (0, 0)
    assert observer.taken[False] == 0
    assert observer.taken[True] >= BATCHES * BATCH


@pytest.mark.parametrize("reader", ["tfrecord", "webdataset", "file"])
def test_a_seek_drops_what_was_fetched_ahead(weed: WeedProcess, data: Path, aws_env: None,
                                             reader: str,
                                             expected: dict[str, list[Any]]) -> None:
    """While the store answers nothing (a proxy holds the requests), starting the prefetch
    requests every sample of the batches computed ahead at once (the one worker took one);
    a seek drops them all, and the batches from there are the folder's."""
    proxy = FaultProxy(weed.s3)
    observer = Counted()
    try:
        with Pipeline(spec(reader, "s3://data", prefetch_queue_depth=2, num_threads=1),
                      data_roots=["s3://data"],
                      objects=stores(weed, observer, proxy.endpoint)) as pipe:
            ahead = ahead_of(pipe)
            with holding(proxy):
                assert not pipe.next_ready(0)
                count, nbytes = ahead.held
                assert 2 * BATCH - 1 <= count <= 2 * BATCH and nbytes > 0
                assert observer.taken[True] <= 1 and not observer.taken[False]
                pipe.seek(2)
                assert ahead.held == (0, 0)
            assert read(pipe, 2) == expected[reader][2:4]
            pipe.wait_prefetched()
            assert ahead.held == (0, 0)
    finally:
        proxy.close()


def test_what_is_fetched_ahead_stays_within_its_bounds(weed: WeedProcess, data: Path,
                                                       aws_env: None,
                                                       expected: dict[str, list[Any]]) -> None:
    """Past fetch_ahead_objects (or fetch_ahead_bytes) a byte range is requested when it
    is read: the same batches, some reads misses."""
    proxy = FaultProxy(weed.s3)
    observer = Counted()
    try:
        objects = stores(weed, observer, proxy.endpoint, fetch_ahead_objects=3)
        with Pipeline(spec("tfrecord", "s3://data", prefetch_queue_depth=2, num_threads=1),
                      data_roots=["s3://data"], objects=objects) as pipe:
            ahead = ahead_of(pipe)
            with holding(proxy):
                assert not pipe.next_ready(0)
                assert 2 <= ahead.held[0] <= 3
            assert read(pipe, BATCHES) == expected["tfrecord"]
    finally:
        proxy.close()
    assert observer.taken[False] >= 1 and observer.taken[True] >= 3
    record = (data / "tf" / "part-0.tfrecord").stat().st_size // 6
    objects = stores(weed, observer, fetch_ahead_bytes=2 * record + 8)
    with Pipeline(spec("tfrecord", "s3://data"), data_roots=["s3://data"],
                  objects=objects) as pipe:
        assert read(pipe, BATCHES) == expected["tfrecord"]
        assert ahead_of(pipe).held[1] <= 2 * record + 8


@pytest.mark.parametrize("reader", ["tfrecord", "webdataset"])
def test_a_failed_request_made_ahead_is_the_reads_error_naming_the_key(
        weed: WeedProcess, data: Path, aws_env: None, reader: str) -> None:
    """The object removed after the pipeline was built: the read that takes its range
    fails naming the bucket and key, and no sample is skipped."""
    prefix = f"gone-{reader}"
    weed.upload_tree("data", data / ("tf" if reader == "tfrecord" else "wds"),
                     f"{prefix}/{'tf' if reader == 'tfrecord' else 'wds'}")
    key = f"{prefix}/tf/part-0.tfrecord" if reader == "tfrecord" \
        else f"{prefix}/wds/shard-0000.tar"
    with Pipeline(spec(reader, f"s3://data/{prefix}", prefetch_queue_depth=1),
                  data_roots=["s3://data"], objects=stores(weed)) as pipe:
        weed.delete("data", key)
        with pytest.raises(errors.DataFileError,
                           match=rf"\(bucket 'data', key '{key}'\): no such key") as raised:
            read(pipe, 3)
        assert raised.value.code == "DATA_LOSS"
        assert pipe.samples_skipped == 0
